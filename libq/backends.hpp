// The one place that knows the backends: a location's scheme picks one (a
// file path: the LMDB backend, libq/lmdb/; nats:// or tls://: the JetStream
// backend, libq/nats/). The CLI opens every queue through here and includes
// no backend's header. A backend adds itself here (ARCHITECTURE.md, "Adding a
// backend").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "libq/broker.hpp"
#include "libq/clock.hpp"
#include "libq/holder.hpp"

namespace q {

// How a cluster authenticates, as the `nats` CLI's variables say (cli reads
// them; README, q(1) ENVIRONMENT). Empty: not given. A location's
// USER:PASSWORD@ (or TOKEN@) wins over user, password and token.
struct NatsCredentials {
  std::string user;       // NATS_USER (a token when no password is given)
  std::string password;   // NATS_PASSWORD
  std::string creds;      // NATS_CREDS: a .creds file (user JWT and NKey seed)
  std::string nkey;       // NATS_NKEY: a file holding an NKey user seed (SU...)
  std::string ca;         // NATS_CA: the CA certificates that sign the servers'
  std::string cert, key;  // NATS_CERT, NATS_KEY: a client certificate and its key
};

struct BrokerRequest {
  std::string location;          // a file path, or nats://... / tls://... (location.hpp)
  const Clock* clock = nullptr;  // nullptr: the system clock
  // A file: the writer lock's longest wait. A cluster: the longest wait for
  // an answer (a node down, an election).
  Millis timeout = 10 * kSecond;
  // A file only.
  bool create = false;     // make the file (and its directories) when missing
  bool durable = true;     // false: commits are not synced (--no-sync)
  bool read_only = false;  // read transactions only (store.hpp, OpenOptions::read_only)
  // A cluster only.
  NatsCredentials credentials;
};

// Opens the queue store the location names. A nats:// location in a binary
// without the NATS backend: Error(Busy) naming it.
std::unique_ptr<Broker> open_broker(const BrokerRequest& request);

// The NATS backend, in the binaries that link libq/nats (q-nats, q-serve):
// their main calls this once, before anything is opened. Defined in
// libq/nats/backend.cpp.
void use_nats_backend();
bool has_nats_backend();
// What the NATS connections of this process published so far (requests,
// publishes, acks), counted as each closes: a bench's requests per command.
std::uint64_t nats_messages_sent();

// q-nats --q-nats-holder: the helper process that answers for a holder of
// leases on the cluster (libq/nats/holders.hpp). Returns its exit code.
int run_nats_holder_helper(const BrokerRequest& request, const std::string& token,
                           const Holder& holder, int watch_fd, int ready_fd);

// For q --version: "LMDB 0.9.24" and, with the NATS backend, ", nats.c 3.4.1".
std::string backend_library_versions();
// The queue file format this build writes.
std::uint32_t file_format_version();

// Something a user should know that is not an error (libq never prints): the
// CLI installs a handler that prints it on standard error.
using NoticeHandler = void (*)(const std::string& message);
void set_notice_handler(NoticeHandler handler);

// What the storage engine is doing, for a signal handler (cli/crash.cpp):
// LMDB trusts its pages, and a damaged one can loop or abort inside a call.
struct StorageActivity {
  bool inside;          // in a call that reads or writes pages
  unsigned long calls;  // such calls started so far
  bool damaged;         // the engine has reported a damaged page
};
StorageActivity storage_activity();  // async-signal-safe

}  // namespace q
