// q verify on a nats:// location: a consistency check of q's own records (the
// settings, lease and other per-queue records in the namespace's bucket)
// against the JetStream streams and consumers they describe. JetStream keeps
// its own data consistent (Raft, checksums); what can go wrong is between
// q's records and the streams: a step cut short by a crash, a record or
// stream changed by hand. ARCHITECTURE.md, "Distributed backend", Verify.
#pragma once

#include <string>
#include <vector>

#include "libq/nats/client.hpp"
#include "libq/nats/dead.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

// Read-only and safe while the queues are in use: a finding about a message
// is looked at again at the end (the message read and its record re-read) and
// reported only when it still holds. One line per problem; empty when clean.
std::vector<std::string> verify_namespace(Client& client, const Names& names, DeadLetters& dead);

}  // namespace q::nats
