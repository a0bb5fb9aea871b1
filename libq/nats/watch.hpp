// Broker::watch on a nats:// location: readable when a message is published
// to any queue of the namespace or any lease record changes (a receive, ack,
// extend or nack), so `q work` waits without polling the cluster. A core
// NATS subscription: no JetStream cost, nothing stored.
#pragma once

#include <memory>
#include <string>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"

namespace q::nats {

std::unique_ptr<ChangeWatch> watch(Client& client, const std::string& ns);

}  // namespace q::nats
