// The JetStream backend's entry in libq/backends.hpp.
#include <nats/nats.h>

#include "libq/backends.hpp"
#include "libq/nats/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/holders.hpp"

namespace q {

namespace nats_backend {
extern std::unique_ptr<Broker> (*open)(const BrokerRequest&);
extern const char* (*library_version)();
}  // namespace nats_backend

namespace {

NatsOpenOptions nats_options(const BrokerRequest& request) {
  NatsOpenOptions options;
  options.location = request.location;
  options.credentials = request.credentials;
  options.timeout = request.timeout;
  options.clock = request.clock;
  return options;
}

}  // namespace

void use_nats_backend() {
  nats_backend::open = [](const BrokerRequest& request) {
    return open_nats_broker(nats_options(request));
  };
  nats_backend::library_version = [] { return nats_GetVersion(); };
}

std::uint64_t nats_messages_sent() { return nats::messages_sent_by_closed_clients(); }

int run_nats_holder_helper(const BrokerRequest& request, const std::string& token,
                           const Holder& holder, int watch_fd, int ready_fd) {
  return nats::run_nats_holder(nats_options(request), token, holder, watch_fd, ready_fd);
}

}  // namespace q
