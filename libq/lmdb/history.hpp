// Internal to libq: the attempt history of a message (`q show`) and q work's
// registry of command lines.
//
// Cost: a receive only writes the holder (pid, q work's start time) into the
// header it rewrites anyway. Whatever ends a delivery (nack, dead-lettering,
// the next receive after a lease ran out) appends the finished attempt to the
// message's `attempts` record, at most kMaxAttempts kept. An ack deletes the
// message with its history, so a message acked on its first delivery never
// touches `attempts`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libq/lmdb/queue_view.hpp"

namespace q {

// Ends the open attempt of `header` (if any) as `end` at `at`; the caller
// writes the header (holder cleared, has_history set) afterwards.
void close_attempt(QueueView& view, std::uint64_t seq, Header& header, AttemptEnd end, Millis at,
                   const std::string& reason, const RunReport& run = {});

// A delivery whose lease ran out without an ending: timed out (or, for q
// work, whose heartbeat keeps a healthy lease, heartbeat lost), as of the
// lease's expiry. Called by a receive before it delivers the message again.
void close_lapsed(QueueView& view, std::uint64_t seq, Header& header);

// Marks `header` as held by this receive.
void open_attempt(Header& header, std::uint32_t pid, Millis worker_since);

// Removes the history with its message.
void drop_history(QueueView& view, std::uint64_t seq, const Header& header);

// The history of a message, oldest first, the open attempt last, with q
// work's command lines filled in from the registry.
std::vector<Attempt> read_history(Txn& txn, const store::Databases& db, std::uint64_t seq,
                                  const Header& header, Millis now);

void register_worker(Txn& txn, const store::Databases& db, std::uint32_t pid, Millis since,
                     const std::string& command);
void unregister_worker(Txn& txn, const store::Databases& db, std::uint32_t pid, Millis since);

}  // namespace q
