#include "libq/backends.hpp"

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/lmdb/broker.hpp"
#include "libq/lmdb/store.hpp"
#include "libq/location.hpp"
#include "libq/lmdb/records.hpp"

namespace q {

namespace nats_backend {
// Set by use_nats_backend() (libq/nats/backend.cpp); null where libq/nats is
// not linked (the static q hands nats:// locations to q-nats before this).
std::unique_ptr<Broker> (*open)(const BrokerRequest&) = nullptr;
const char* (*library_version)() = nullptr;
}  // namespace nats_backend

bool has_nats_backend() { return nats_backend::open != nullptr; }

std::unique_ptr<Broker> open_broker(const BrokerRequest& request) {
  if (is_nats_location(request.location)) {
    if (!nats_backend::open)
      throw Error(ErrorKind::Busy, fmt::format("{}: this q has no NATS backend (q-nats)",
                                               redact_location(request.location)));
    return nats_backend::open(request);
  }
  LmdbOptions options;
  options.open.path = request.location;
  options.open.create = request.create;
  options.open.durable = request.durable;
  options.open.read_only = request.read_only;
  options.open.lock_timeout = request.timeout;
  options.clock = request.clock;
  return open_lmdb_broker(options);
}

std::string backend_library_versions() {
  std::string text = "LMDB " + store::lmdb_library_version();
  if (nats_backend::library_version)
    text += fmt::format(", nats.c {}", nats_backend::library_version());
  return text;
}

std::uint32_t file_format_version() { return store::kFormatVersion; }

void set_notice_handler(NoticeHandler handler) { store::set_notice_handler(handler); }

StorageActivity storage_activity() {
  const auto& a = store::g_lmdb_activity;
  return StorageActivity{a.inside != 0, a.calls, a.damaged != 0};
}

}  // namespace q
