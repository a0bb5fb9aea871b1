// The Broker on a NATS JetStream cluster (issue 16), reached with a location
// nats://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/NAMESPACE or tls://... Design: ARCHITECTURE.md,
// "Distributed backend (NATS JetStream)". Built only into `q-nats` (libnats is
// a shared library; the static `q` hands nats:// locations to q-nats).
#pragma once

#include <memory>
#include <string>

#include "libq/backends.hpp"
#include "libq/broker.hpp"

namespace q {

struct NatsOpenOptions {
  std::string location;  // nats://[USER:PASSWORD@]h1:p1,h2:p2/NAMESPACE, tls://...
  NatsCredentials credentials;
  Millis timeout = 10 * kSecond;  // longest wait for the cluster (a node down, an election)
  const Clock* clock = nullptr;   // nullptr: the system clock
};

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options);

}  // namespace q
