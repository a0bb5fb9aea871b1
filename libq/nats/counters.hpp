// Lifetime counters of queues on JetStream (`q stats`: received, acked,
// nacked, dead_lettered, redriven, deduplicated, stale_acks; sent from the queue's
// stream). One counters stream per namespace, QC_<NS>, subjects
// qc.<NS>.<Q>.<counter>: each counted operation publishes one empty event
// message there, after its decision (the lease CAS), with a Nats-Msg-Id
// naming the decision, so a retried or redone publish counts once. A
// counter is its subject's message count, plus the total a roll-up left:
// a roll-up (`Nats-Rollup: sub`, payload the total, published with the
// subject's expected last sequence) replaces the events it summed, and an
// event landing meanwhile makes it fail and start again, so nothing is lost.
// ARCHITECTURE.md, "Distributed backend", Lifetime counters.
#pragma once

#include <string>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

// The counted operations: the last token of an event's subject.
namespace counter {
constexpr const char* kReceived = "received";
constexpr const char* kAcked = "acked";
constexpr const char* kNacked = "nacked";
constexpr const char* kDeadLettered = "dead_lettered";
constexpr const char* kRedriven = "redriven";
constexpr const char* kDeduplicated = "deduplicated";
constexpr const char* kStaleAcks = "stale_acks";
// Messages that came into the queue by a redrive (from it or another
// queue): its stream's last sequence less these is `sent`.
constexpr const char* kArrived = "arrived";
}  // namespace counter

// The id of the event counting a decision about delivery `nonce` of
// message `seq` of `stream` (receipts are unique, so is this).
inline std::string event_id(const char* kind, const std::string& stream, std::uint64_t seq,
                            std::uint64_t nonce = 0) {
  return std::string(kind) + "." + stream + "." + std::to_string(seq) + "." + std::to_string(nonce);
}

// A decision's event is published again by whoever next sees the decision
// (a receive taking the message back) when it is younger than this: the
// counters stream recognises the id for 20 minutes, so a repeat inside this
// counts once, and an event its process was killed before publishing is
// counted then.
constexpr Millis kRecountWithin = 15 * kMinute;

class Counters {
 public:
  Counters(Client& client, const Names& names, const int& replicas)
      : client_(client), names_(names), replicas_(replicas) {}

  // Counts one event of `counter` for `queue`; `id` names the decision it
  // counts (the same id again within the stream's dedup window counts once).
  // The decision is made before: a cluster that does not answer loses this
  // count rather than failing the operation (the rules of the lease records).
  void count(const std::string& queue, const char* counter, const std::string& id);
  // count() of several events together (nats/pipeline.hpp): one round trip.
  struct Event {
    const char* counter;
    std::string id;
  };
  void count_together(const std::string& queue, const std::vector<Event>& events);
  // The queue's counters; `last_seq` is its stream's last sequence (sent).
  QueueCounters read(const std::string& queue, std::uint64_t last_seq);
  // Creates the namespace's counters stream (or leaves the one there).
  void ensure_stream();
  // Removes every counter of `queue` (q delete).
  void remove(const std::string& queue);

 private:
  Client& client_;
  const Names& names_;
  const int& replicas_;

  std::string stream() const { return "QC_" + names_.ns; }
  std::string subject(const std::string& queue, const char* counter) const {
    return "qc." + names_.ns + "." + encode_name(queue) + "." + counter;
  }
  struct Base {
    std::uint64_t seq = 0;    // of the subject's first message; 0: none
    std::uint64_t total = 0;  // a roll-up's total (it counts itself), else 1
  };
  // The first message of `subj`: a roll-up or an event.
  Base first_of(const std::string& subj);
  std::uint64_t last_seq_of(const std::string& subj);
  // Messages per subject under `filter`; empty when the stream is missing.
  std::vector<std::pair<std::string, std::uint64_t>> subject_counts(const std::string& filter);
  std::uint64_t total(const std::string& subj, std::uint64_t msgs, const Base& base) const;
  void roll_up(const std::string& queue, const char* counter);
};

}  // namespace q::nats
