// Dead letters on JetStream (JetStream's max deliveries does not dead-letter:
// the message stays and one advisory goes out). Each queue has a dead-letter
// stream QD_<NS>_<Q>, limits retention for 14 days, one subject per message
// id. A move is decided by a CAS of the message's lease to the dead state;
// then the message is published there with Nats-Msg-Id = <stream>:<seq>
// (idempotent), terminated and deleted from the queue's stream, and the lease
// removed. A receive that finds a dead lease redoes the steps after the CAS.
// ARCHITECTURE.md, "Distributed backend", Dead letters.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/counters.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

class DeadLetters {
 public:
  DeadLetters(Client& client, const Names& names, const Clock& clock, const int& replicas)
      : client_(client), names_(names), clock_(clock), replicas_(replicas) {}

  // Creates the queue's dead-letter stream (or leaves the one there).
  void ensure_stream(const std::string& queue);
  // Deletes it; returns how many dead letters it held.
  std::uint64_t delete_stream(const std::string& queue);

  // The steps after the decision: `msg` is message `seq` of `queue` (a
  // delivery or the stored message), `dead` its lease in the dead state at
  // `revision`, `reply` the ack subject of a delivery of it ("" when none).
  void finish(const std::string& queue, natsMsg* msg, std::uint64_t seq, const Lease& dead,
              std::uint64_t revision, const std::string& reply);

  // Dead letters in the order they died, with the sequence of each in the
  // dead-letter stream, until `each` returns false.
  void each(const std::string& queue,
            const std::function<bool(const Message&, std::uint64_t)>& each);
  struct Found {
    Message message;
    std::uint64_t seq;
    std::uint64_t order = 0;  // a FIFO message's place in send order (Q-Order); 0: none
  };
  void each_found(const std::string& queue, const std::function<bool(const Found&)>& each);
  std::optional<Found> find(const std::string& queue, const std::string& id);
  std::uint64_t count(const std::string& queue);
  std::uint64_t purge(const std::string& queue);
  // Publishes dead letter `found` of `queue` to the queue `to` on `subject`
  // (keeping its id, with Nats-Msg-Id = <dead stream>:<seq>, so a repeat
  // stores nothing), then removes it from the dead letters. `fifo`: `to` is a
  // FIFO queue (the message keeps its group, and on a redriven subject its
  // place in send order). Error(Full) when `to` is at max depth.
  void redrive(const std::string& queue, const Found& found, const std::string& to,
               const std::string& subject, bool fifo);
  // Removes the dead letter at `seq`; true when it was there.
  bool remove(const std::string& queue, std::uint64_t seq);
  // Lifetime counters: a move counts `dead_lettered` (event id by the
  // message's stream and sequence, so a redone move counts once), a redrive
  // `redriven` on the queue and `arrived` on the one it goes to.
  void use_counters(Counters* counters) { counters_ = counters; }

 private:
  Client& client_;
  const Names& names_;
  const Clock& clock_;
  const int& replicas_;
  Counters* counters_ = nullptr;

  static std::uint64_t order_of(natsMsg* msg);
  // The stream's state; nullopt when the queue has no dead-letter stream.
  std::optional<jsStreamState> state(const std::string& queue);
};

}  // namespace q::nats
