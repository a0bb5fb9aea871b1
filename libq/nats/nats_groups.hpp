// FIFO queues on JetStream (ARCHITECTURE.md, "Distributed backend", FIFO).
// Each message group has its own subject in the queue's one stream,
// q.<NS>.<Q>.g.<token>, and the work-queue stream keeps exactly the messages
// not yet acked, so the group's oldest message still there (the first on its
// subject) is its head. Only the head is ever leased: a delivery of any other
// message of the group is passed over, its ack subject remembered in a wait
// record so that the head's ack wakes it at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nats_client.hpp"
#include "nats_records.hpp"

namespace q::nats {

// The subject token of a message group: 16 hex digits of the SHA-256 of its
// id (group ids may hold characters a subject cannot).
std::string group_token(const std::string& group);

class Groups {
 public:
  Groups(Client& client, const Names& names) : client_(client), names_(names) {}

  // The subject a message of `group` is published to.
  std::string subject(const std::string& queue, const std::string& group) const {
    return names_.subject(queue) + ".g." + group_token(group);
  }
  // The filter of all group subjects of a FIFO queue (its stream's subject).
  std::string filter(const std::string& queue) const { return names_.subject(queue) + ".g.*"; }

  // The sequence of the first message at or after `from` on `subject` in the
  // queue's stream (the group's head when `from` is 1); nullopt when none.
  std::optional<std::uint64_t> first_on(const std::string& queue, const std::string& subject,
                                        std::uint64_t from);
  // Whether the delivery of message `seq` on group subject `subject` may be
  // leased: only the group's head may. Any other message is passed over:
  // JetStream's timer is re-armed to the head's lease (at least `ack_wait`),
  // and the delivery's ack subject `reply` is remembered so that the head's
  // ack wakes it at once. A message no longer in the stream is passed over
  // without a word (it was acked while this delivery was on its way).
  bool admit(const std::string& queue, const std::string& subject, std::uint64_t seq,
             const std::string& reply, Millis now, Millis ack_wait);
  // Message `seq` of the group on `subject` left the queue (acked): the
  // group's next message, when a delivery of it was passed over, is handed
  // back to JetStream (-NAK, no delay) so a receive gets it now rather than
  // when its pass-over delay ends. Reports no failure (only latency rides on it).
  void wake_next(const std::string& queue, const std::string& subject, std::uint64_t seq);

  static std::string wait_prefix(const std::string& queue) {
    return "wait." + encode_name(queue) + ".";
  }

 private:
  struct Head {
    std::uint64_t seq;
    Millis until;  // of its lease; 0: none
  };
  // The group's head: its first message whose ack is not decided (a lease
  // `a` means acked, even while the stream still shows the message).
  std::optional<Head> head(const std::string& queue, const std::string& subject);
  void wait(const std::string& queue, std::uint64_t seq, const std::string& reply);

  Client& client_;
  const Names& names_;
};

}  // namespace q::nats
