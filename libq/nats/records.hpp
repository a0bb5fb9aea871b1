// What NatsBroker stores and how it names things on JetStream: the queue's
// settings record, the lease record of a delivered message (the fencing that
// JetStream lacks; ARCHITECTURE.md, "Distributed backend"), and the names of
// a queue's stream, subject and records.
#pragma once

#include <optional>

#include <nats/nats.h>

#include <cstdint>
#include <string>
#include <vector>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"

namespace q::nats {

constexpr Millis kNs = 1'000'000;  // nanoseconds per millisecond

// The JetStream names of a namespace's queues. The namespace has no '_', so
// "Q_<ns>_<queue>" cannot be read two ways.
struct Names {
  std::string ns;
  std::string stream(const std::string& queue) const {
    return "Q_" + ns + "_" + encode_name(queue);
  }
  std::string subject(const std::string& queue) const {
    return "q." + ns + "." + encode_name(queue);
  }
  static std::string config_key(const std::string& queue) { return "config." + encode_name(queue); }
  static std::string lease_prefix(const std::string& queue) {
    return "lease." + encode_name(queue) + ".";
  }
  static std::string lease_key(const std::string& queue, std::uint64_t seq) {
    return lease_prefix(queue) + std::to_string(seq);
  }
  // Dead letters of a queue: one stream, one subject per message id (at most
  // one message each, so a move repeated after the dedup window replaces).
  std::string dead_stream(const std::string& queue) const {
    return "QD_" + ns + "_" + encode_name(queue);
  }
  std::string dead_subject(const std::string& queue, const std::string& id) const {
    return "qd." + ns + "." + encode_name(queue) + "." + id;
  }
};

// The settings record of a queue (key config.<queue>): JSON.
struct StoredQueue {
  QueueConfig config;
  Millis created_at = 0;
  std::uint64_t revision = 0;
  // `q pause`: kept in the settings record, so the get every receive already
  // makes sees it (no extra round trip); may have ended (check until).
  std::optional<Pause> pause;
};
std::string encode_config(const QueueConfig& config, Millis created_at,
                          const std::optional<Pause>& pause = std::nullopt);
// Throws Error(Io) naming the queue when the record is damaged.
StoredQueue parse_config(const std::string& queue, const Record& record);

// q's lease on one message: who may act on it, until when. The receipt is
// the message id and `nonce`; any write of the record goes through a CAS on
// its revision, so of two racing writers exactly one wins.
struct Lease {
  enum State : char { Leased = 'l', Released = 'r', Acked = 'a', Dead = 'd' };
  State state = Leased;
  std::uint64_t nonce = 0;  // of the receipt of the current delivery
  Millis until = 0;         // Leased: visible again at; Released: delayed until
  Millis received_at = 0;   // last receive
  std::string group;        // FIFO: the subject of the message's group
  Millis first_received_at = 0;
  std::uint32_t receives = 0;
  std::string reply;   // the JetStream ack subject of the current delivery
  std::string reason;  // of the last nack
  // The attempt history (nats/history.hpp): who holds the open delivery,
  // and the deliveries that ended.
  std::uint32_t pid = 0;
  Millis worker_since = 0;
  std::vector<Attempt> history;
  // The holder of the open delivery (nats/holders.hpp), empty: none.
  std::string holder;

  // JSON with a fresh write token, so every encoding is unique (put_if).
  std::string encode() const;
  static Lease decode(const std::string& text);  // Error(Io) when damaged
};

// A q message as stored on a queue's stream or a dead-letter stream: its id
// is the Q-Id header (kept through a redrive), else m<`seq`>; body, attributes,
// dedup id, group and sent_at from the headers; a dead letter's reason, receive
// count and times too.
Message message_of(natsMsg* msg, std::uint64_t seq);
// Copies the headers that travel with a message when it moves (Q-Id, Q-Sent-At,
// Q-Dedup, Q-Attrs, Q-Group); Q-Id is set to `id`.
void copy_message_headers(natsMsg* from, natsMsg* to, const std::string& id);

// A header of a NATS message; empty when absent.
std::string header(natsMsg* msg, const char* key);
// The body of a NAK that redelivers at now + delay (plain -NAK for 0).
std::string nak_body(Millis delay);

}  // namespace q::nats
