// Delayed messages on JetStream 2.9, which has no scheduled publish
// (ARCHITECTURE.md, "Distributed backend", Delays). A delayed message is
// published at once with a Q-Visible-At header, and its lease record is
// written by the send as released until that time: the lease rules then
// treat it exactly like a message nacked with a delay (receives pass it over
// and re-arm JetStream's timer with -NAK {"delay"}; stats count it delayed).
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <string>
#include <vector>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

constexpr const char* kVisibleAtHeader = "Q-Visible-At";

// When a message sent now with `options` to a queue with `config` becomes
// visible (now when not delayed), as on a file: --at wins over --delay, which
// wins over the queue's delay. Error(InvalidData) when that is beyond the
// queue's retention.
Millis send_visible_at(const std::string& queue, const QueueConfig& config,
                       const SendOptions& options, Millis now);

// The lease record of a message not yet visible: released until `until`,
// never received.
Lease delayed_lease(Millis until);

// The Q-Visible-At header of a delivery; 0 when it has none.
Millis header_visible_at(natsMsg* msg);

// Writes the delayed lease of each message `seqs` of `queue` (unless a
// receive wrote it first, from the header). A failure is reported: the
// messages are sent, and a receive still holds them back by their header.
void mark_delayed(Client& client, const std::string& queue, const std::vector<std::uint64_t>& seqs,
                  Millis until);

}  // namespace q::nats
