// The Broker on a NATS JetStream cluster (issue 16), reached with a location
// nats://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/NAMESPACE or tls://... Design: ARCHITECTURE.md,
// "Distributed backend (NATS JetStream)". Built only into `q-nats` (libnats is
// a shared library; the static `q` hands nats:// locations to q-nats).
#pragma once

#include <memory>
#include <string>

#include "broker.hpp"

namespace q {

// How q logs in to the cluster and checks it, as the `nats` CLI's environment
// variables say (cli/main_nats.cpp reads them; README, q(1) ENVIRONMENT).
// Empty: not given. A location's USER:PASSWORD@ (or TOKEN@) wins over user,
// password and token.
struct NatsCredentials {
  std::string user;       // NATS_USER (a token when no password is given)
  std::string password;   // NATS_PASSWORD
  std::string creds;      // NATS_CREDS: a .creds file (user JWT and NKey seed)
  std::string nkey;       // NATS_NKEY: a file holding an NKey user seed (SU...)
  std::string ca;         // NATS_CA: the CA certificates that sign the servers'
  std::string cert, key;  // NATS_CERT, NATS_KEY: a client certificate and its key
};

struct NatsOpenOptions {
  std::string location;  // nats://[USER:PASSWORD@]h1:p1,h2:p2/NAMESPACE, tls://...
  NatsCredentials credentials;
  Millis timeout = 10 * kSecond;  // longest wait for the cluster (a node down, an election)
  const Clock* clock = nullptr;   // nullptr: the system clock
};

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options);

}  // namespace q
