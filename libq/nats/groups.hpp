// FIFO queues on JetStream (ARCHITECTURE.md, "Distributed backend", FIFO).
// Each message group has its own subject in the queue's one stream,
// q.<NS>.<Q>.g.<token>, and the work-queue stream keeps exactly the messages
// not yet acked, so the group's oldest message still there (the first on its
// subject) is its head. A dead letter redriven into its own queue goes back to
// its place in send order: to the group's second subject q.<NS>.<Q>.r.<token>,
// with its place (`Q-Order`, the sequence it was sent as); the head is the
// first of the two subjects' first messages in that order. Only the head is
// ever leased, and only while no other message of its group holds a lease: a
// delivery of any other message is passed over, its ack subject remembered in
// a wait record so that the group's next change (an ack, a move to the dead
// letters) wakes it at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libq/nats/client.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

// The subject token of a message group: 16 hex digits of the SHA-256 of its
// id (group ids may hold characters a subject cannot).
std::string group_token(const std::string& group);

// The header that carries a message's place in its group's send order when it
// is not its stream sequence (a redriven message; a dead letter of a group).
inline constexpr const char* kOrderHeader = "Q-Order";

class Groups {
 public:
  Groups(Client& client, const Names& names) : client_(client), names_(names) {}

  // The subject a message of `group` is published to.
  std::string subject(const std::string& queue, const std::string& group) const {
    return names_.subject(queue) + ".g." + group_token(group);
  }
  // The subject a dead letter of `group` is redriven to in its own queue,
  // where it goes back to its place in send order (the header Q-Order).
  std::string redriven_subject(const std::string& queue, const std::string& group) const {
    return names_.subject(queue) + ".r." + group_token(group);
  }
  // The filters of a FIFO queue's stream: sent and redriven messages.
  std::vector<std::string> filters(const std::string& queue) const {
    return {names_.subject(queue) + ".g.*", names_.subject(queue) + ".r.*"};
  }
  // The group's key (its send subject) from the subject of any of its messages.
  static std::string group_of(const std::string& subject);
  // Whether `subject` is a group's redriven subject.
  static bool redriven(const std::string& subject);

  // Whether the delivery of message `seq` on group subject `subject` may be
  // leased: only the group's head may, and only while no other message of
  // the group is leased. Any other is passed over (pass()). A message whose
  // ack or move is decided is admitted (the lease rules finish it); one no
  // longer in the stream is passed over without a word (acked while this
  // delivery was on its way).
  bool admit(const std::string& queue, const std::string& subject, std::uint64_t seq,
             const std::string& reply, Millis now, Millis ack_wait);
  // After the lease of an admitted head was written: false when another
  // message of its group became its head or was leased meanwhile (a redrive
  // that raced with it); the caller then takes its lease back and pass()es.
  bool alone(const std::string& queue, const std::string& subject, std::uint64_t seq, Millis now);
  // Passes a delivery over: JetStream's timer is re-armed to when its group
  // is free at the latest (at least `ack_wait`), and the delivery's ack
  // subject `reply` is remembered so that the group's next change wakes it.
  void pass(const std::string& queue, const std::string& subject, std::uint64_t seq,
            const std::string& reply, Millis now, Millis ack_wait);
  // A message of the group with key `group` (group_of) left the queue or
  // let go of its lease for good (acked, dead-lettered): the group's head,
  // when a delivery of it was passed over, is handed back to JetStream
  // (-NAK, no delay) so a receive gets it now rather than when its pass-over
  // delay ends. Reports no failure (only latency rides on it).
  void wake(const std::string& queue, const std::string& group, Millis now);
  // How many groups have messages: the stream's subjects (`num_subjects`),
  // less a group counted twice (sent and redriven messages).
  std::uint64_t count(const std::string& queue, std::uint64_t num_subjects);
  // A FIFO stream made before redriven subjects existed gets them.
  void ensure_filters(const std::string& queue);

  static std::string wait_prefix(const std::string& queue) {
    return "wait." + encode_name(queue) + ".";
  }

 private:
  struct First {
    std::uint64_t seq;
    std::uint64_t order;  // its place in send order
  };
  // The first message at or after `from` on `subject` in the queue's stream;
  // nullopt when none.
  std::optional<First> first_on(const std::string& queue, const std::string& subject,
                                std::uint64_t from);
  struct Head {
    std::uint64_t seq;
    Millis until = 0;       // of its lease; 0: none
    Millis held_until = 0;  // another message of the group is leased until then
  };
  struct Seen {
    std::vector<std::uint64_t> decided;  // passed over: their ack or move is decided
    std::optional<std::uint64_t> sent_first, again_first;  // the candidates
  };
  // The group's head: of the first message on each of its two subjects whose
  // ack or move is not decided (a lease `a` or `d`), the one first in send
  // order.
  std::optional<Head> head(const std::string& queue, const std::string& group, Millis now,
                           Seen* seen = nullptr);
  // The redriven subject of the group with key `group`.
  static std::string again_of(const std::string& group);
  void wait(const std::string& queue, std::uint64_t seq, const std::string& reply);

  Client& client_;
  const Names& names_;
};

}  // namespace q::nats
