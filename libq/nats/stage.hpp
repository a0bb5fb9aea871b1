// `q work SRC --to DST` on JetStream (Broker::ack_and_send): there is no
// transaction over two streams, so the stage is made exact by naming each
// output after the delivery it comes from. The outputs are published first,
// each with the Nats-Msg-Id "w" + a digest of (SRC's stream, its creation
// time, the source message's sequence) + "." + the output's index; then the
// source is acked with the lease CAS, as `q ack` does. A crash (or a lost
// lease) between the two leaves the outputs in DST once and the source
// leased; it is delivered again when its lease runs out, its command runs
// again, and that run's outputs carry the same ids: DST's stream stores none
// of them a second time while they are within its dedup window (the queue's
// dedup window; 2 min when it has none; never longer than its retention).
// ARCHITECTURE.md, "q work on nats://", has the whole argument.
#pragma once

#include <cstdint>
#include <string>

#include "libq/broker.hpp"

namespace q::nats {

// The Nats-Msg-Id prefix of the outputs of message `seq` of the stream
// `stream`, created at `created_at` (a queue deleted and made again starts
// its sequences afresh: its outputs must not pass for the old ones').
std::string stage_id_prefix(const std::string& stream, Millis created_at, std::uint64_t seq);

// For tests only: when the environment variable Q_TEST_NATS_KILL_AT names
// `point` (one name or a comma-separated list), the process kills itself
// with SIGKILL here (a crash at a chosen
// point, e.g. "stage-sent": the outputs published, the source not acked);
// when Q_TEST_NATS_STOP_AT names it, the process stops itself (SIGSTOP) there
// and goes on when continued. The points: "stage-sent"; "cas-claimed" and
// "cas-written" (put_if: its claim taken / its write done, the claim not yet
// removed); "ack-sent" (an ack's message gone from the stream, its lease
// not removed); "dead-removed" (a dead-letter move's message removed from
// the queue, its lease not).
void kill_point(const char* point);

}  // namespace q::nats
