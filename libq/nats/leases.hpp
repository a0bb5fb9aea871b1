// The lease records that fence acks, extends and nacks (JetStream has no
// fencing): taking a delivery, finding the lease a receipt names, changing it
// by compare-and-set, and moving JetStream's redelivery timer to follow it.
// The rules are ARCHITECTURE.md's, "Distributed backend", Receive.
#pragma once

#include <optional>
#include <random>
#include <string>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/counters.hpp"
#include "libq/nats/history.hpp"
#include "libq/nats/groups.hpp"
#include "libq/nats/dead.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

class LeaseBook {
 public:
  LeaseBook(Client& client, const Clock& clock, DeadLetters& dead);

  // Rule 1: a delivery of `queue` becomes a Message with a fresh receipt, or
  // nothing (still leased, acked, dead-lettered now (it had had
  // `max_receives`, 0: no limit), or others won the lease).
  // `read`: the delivery's lease record as read before (get_together), or null.
  std::optional<Message> take(const std::string& queue, natsMsg* msg, Millis vt, Millis ack_wait,
                              std::uint32_t max_receives,
                              const std::optional<Record>* read = nullptr);
  // The plain deliveries of a batch (first delivery, not delayed, no group)
  // taken together: their leases written in one round by CAS on "no record"
  // (nats/pipeline.hpp), which fails where one exists (a send's delay
  // record). taken[i] says which; take() decides the others.
  std::vector<std::optional<Message>> take_first_deliveries(const std::string& queue,
                                                            const std::vector<natsMsg*>& msgs,
                                                            Millis vt, Millis ack_wait,
                                                            std::vector<bool>& taken);
  // Until count_deferred, the counts of takes are kept (to be published
  // together after the batch, each still after its decision) in `events`.
  void defer_counts(std::vector<Counters::Event>* events) { deferred_ = events; }
  void count_deferred(const std::string& queue);
  // Decides to dead-letter the delivery a receipt names (CAS to the dead
  // state) and moves it; Error(Stale) as current().
  void dead_letter(const std::string& queue, const std::string& stream, const std::string& receipt,
                   const std::string& reason, const RunReport& run = {});

  struct Current {
    std::uint64_t seq;
    Lease lease;
    std::uint64_t revision;
  };
  // The lease a receipt names when it is still that delivery's; else
  // Error(Stale) saying why, or Error(InvalidData) for a malformed receipt.
  Current current(const std::string& queue, const std::string& receipt);
  // The same, from the lease record read before (get_together).
  Current current(const std::string& receipt, std::optional<Record> record,
                  const std::string& queue);
  // The message sequence a receipt names; Error(InvalidData) when malformed.
  static std::uint64_t receipt_seq(const std::string& receipt);
  // Writes `next` over the lease at `revision`; when another write came
  // first, reads again (Error(Stale) when the receipt went stale meanwhile).
  // Returns the new revision.
  std::uint64_t change(const std::string& queue, const std::string& receipt, std::uint64_t seq,
                       Lease next, std::uint64_t revision);
  // Moves JetStream's redelivery of a pending message to now + delay; a
  // cluster that does not answer is no failure (the lease rules).
  void rearm(const std::string& reply, Millis delay);
  // FIFO queues: deliveries of a group's message other than its head are
  // passed over (nats/groups.hpp).
  void use_groups(Groups* groups) { groups_ = groups; }
  // Lifetime counters (nats/counters.hpp): a receive counts `received`, the
  // finish of an ack another left counts `acked` (with the acker's event id).
  void use_counters(Counters* counters) { counters_ = counters; }
  // The attempt history (nats/history.hpp): who the next takes are for (pid,
  // q work's start time or 0), and q work's registry for command lines.
  void receiver(std::uint32_t pid, Millis worker_since) {
    pid_ = pid;
    worker_since_ = worker_since;
  }
  void use_workers(Workers* workers) { workers_ = workers; }
  // The holder token the next takes carry (nats/holders.hpp); empty: none.
  void holding(std::string token) { holder_ = std::move(token); }
  // The attempt the delivery `lease` holds, ended now as `end`.
  Attempt ended(const Lease& lease, AttemptEnd end, const std::string& reason = {},
                const RunReport& run = {});
  // After the CAS to acked: +ACK, and once the message is gone from `stream`,
  // the lease (at `revision`) is removed. Until then the acked lease stays
  // (a receive that meets it finishes the ack): a lease is never missing
  // while its message is still there, so a receive that finds no lease for a
  // redelivery knows the message is gone. A cluster that does not answer is
  // no failure (the ack stands).
  void finish_ack(const std::string& stream, std::uint64_t seq, const std::string& reply,
                  std::uint64_t revision);
  // finish_ack of several deliveries of `stream` together (nats/pipeline.hpp).
  struct Finish {
    std::uint64_t seq;
    std::string reply;
    std::uint64_t revision;
  };
  void finish_acks(const std::string& stream, const std::vector<Finish>& acks);
  // Uniform in [0, 1), for backoff jitter.
  double unit() { return static_cast<double>(random_() >> 11) * 0x1.0p-53; }

 private:
  Client& client_;
  const Clock& clock_;
  DeadLetters& dead_;
  bool present(const std::string& stream, std::uint64_t seq);
  void recount(const std::string& queue, const std::string& stream, std::uint64_t seq,
               const Lease& prev, Millis now);
  void count(const std::string& queue, const char* counter, std::string id);
  Lease new_lease(const Lease* prev, Millis now, Millis vt, const std::string& reply,
                  std::string group, std::vector<Attempt> history);
  Message handed_out(const std::string& queue, natsMsg* msg, const std::string& stream,
                     std::uint64_t seq, const Lease& l, Millis vt, Millis ack_wait,
                     const std::string& group);
  std::vector<Counters::Event>* deferred_ = nullptr;
  std::mt19937_64 random_;
  Groups* groups_ = nullptr;
  Counters* counters_ = nullptr;
  Workers* workers_ = nullptr;
  std::uint32_t pid_ = 0;
  Millis worker_since_ = 0;
  std::string holder_;
};

}  // namespace q::nats
