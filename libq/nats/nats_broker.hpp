// The Broker on a NATS JetStream cluster (issue 16), reached with a location
// nats://HOST:PORT[,HOST:PORT...]/NAMESPACE. Design: ARCHITECTURE.md,
// "Distributed backend (NATS JetStream)". Built only into `q-nats` (libnats is
// a shared library; the static `q` hands nats:// locations to q-nats).
#pragma once

#include <memory>
#include <string>

#include "broker.hpp"

namespace q {

struct NatsOpenOptions {
  std::string location;           // nats://h1:p1,h2:p2/NAMESPACE
  Millis timeout = 10 * kSecond;  // longest wait for the cluster (a node down, an election)
  const Clock* clock = nullptr;   // nullptr: the system clock
};

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options);

}  // namespace q
