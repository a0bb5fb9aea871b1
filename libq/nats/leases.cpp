#include "libq/nats/leases.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/nats/delay.hpp"
#include "libq/nats/pipeline.hpp"
#include "libq/nats/history.hpp"
#include "libq/nats/stage.hpp"
#include "libq/ids.hpp"

namespace q::nats {

using json = nlohmann::json;

LeaseBook::LeaseBook(Client& client, const Clock& clock, DeadLetters& dead)
    : client_(client), clock_(clock), dead_(dead) {
  std::random_device rd;
  random_.seed((static_cast<std::uint64_t>(rd()) << 32) | rd());
}

void LeaseBook::count(const std::string& queue, const char* counter, std::string id) {
  if (deferred_)
    deferred_->push_back({counter, std::move(id)});
  else
    counters_->count(queue, counter, id);
}

void LeaseBook::count_deferred(const std::string& queue) {
  if (!deferred_) return;
  std::vector<Counters::Event> events = std::move(*deferred_);
  deferred_ = nullptr;
  if (!events.empty() && counters_) counters_->count_together(queue, events);
}

std::optional<Message> LeaseBook::take(const std::string& queue, natsMsg* msg, Millis vt,
                                       Millis ack_wait, std::uint32_t max_receives,
                                       const std::optional<Record>* read) {
  jsMsgMetaData* meta_raw = nullptr;
  if (natsMsg_GetMetaData(&meta_raw, msg) != NATS_OK) return std::nullopt;
  nats::MetaPtr meta(meta_raw);
  std::uint64_t seq = meta->Sequence.Stream;
  std::string reply = natsMsg_GetReply(msg) ? natsMsg_GetReply(msg) : "";
  std::string key = Names::lease_key(queue, seq);
  std::string group = header(msg, "Q-Group");
  const std::string subject = natsMsg_GetSubject(msg);
  const bool fifo = !group.empty() && groups_;
  if (fifo && !groups_->admit(queue, subject, seq, reply, clock_.now(), ack_wait))
    return std::nullopt;
  // The group's next message may go now: its head left for good.
  auto wake = [&] {
    if (fifo) groups_->wake(queue, Groups::group_of(subject), clock_.now());
  };
  for (int attempt = 0; attempt < 3; ++attempt) {
    Millis now = clock_.now();
    // The record read with the others of the batch first (a stale read only
    // makes the CAS below fail and read again).
    auto cur = attempt == 0 && read ? *read : client_.get(key);
    Lease prev;
    if (cur) prev = Lease::decode(cur->value);
    if (!cur) {
      // Delayed at its send (nats/delay.hpp), and the send's lease record is
      // not there (yet): write it from the header, as the send would have.
      if (Millis at = header_visible_at(msg); at > now) {
        if (!client_.put_if(key, delayed_lease(at).encode(), 0)) continue;
        client_.request(reply, nak_body(at - now));
        return std::nullopt;
      }
    }
    if (cur && prev.state == Lease::Acked) {
      // Acked by a receipt holder who did not reach JetStream: finish it.
      // Its count too, with the acker's event id (counted once if it had).
      // Published now, not with the receive's counts: before its +ACK.
      if (counters_)
        counters_->count(queue, counter::kAcked, event_id("ak", meta->Stream, seq, prev.nonce));
      finish_ack(meta->Stream, seq, reply, cur->revision);
      wake();
      return std::nullopt;
    }
    // No lease, yet delivered before: its lease went with an ack or a move to
    // the dead letters, which remove the lease only once the message is gone
    // from the stream (finish_ack, DeadLetters::finish); this delivery was on
    // its way before. Look: a message that is gone is passed over.
    if (!cur && meta->NumDelivered > 1 && !present(meta->Stream, seq)) return std::nullopt;
    if (cur && prev.state == Lease::Dead) {
      // Decided by another that did not finish the move: finish it.
      dead_.finish(queue, msg, seq, prev, cur->revision, reply);
      wake();
      return std::nullopt;
    }
    if (cur && prev.until > now) {
      // Still leased (or released with a delay): JetStream's timer ran
      // ahead of the lease. Re-arm it to the lease and pass.
      client_.request(reply, nak_body(prev.until - now));
      return std::nullopt;
    }
    // A delivery whose lease ran out ended there (the attempt history).
    std::vector<Attempt> history =
        cur ? prev.history : attempts_from_header(header(msg, "Q-History"));
    if (cur && prev.state == Lease::Leased)
      add_attempt(history, ended(prev, prev.worker_since != 0 ? AttemptEnd::HeartbeatLost
                                                              : AttemptEnd::TimedOut));
    if (cur && counters_) recount(queue, meta->Stream, seq, prev, now);
    if (cur && max_receives != 0 && prev.receives >= max_receives) {
      // Its receives are used up: to the dead letters instead (the CAS decides).
      Lease dead = prev;
      dead.history = history;
      dead.state = Lease::Dead;
      dead.until = now;
      if (dead.reason.empty())
        dead.reason = "not acknowledged after " + plural(prev.receives, "receive");
      auto rev = client_.put_if(key, dead.encode(), cur->revision, Client::OnClaim::Pass);
      if (!rev) continue;
      dead_.finish(queue, msg, seq, dead, *rev, reply);
      wake();
      return std::nullopt;
    }
    Lease l = new_lease(cur ? &prev : nullptr, now, vt, reply,
                        fifo ? Groups::group_of(subject) : std::string(), std::move(history));
    // A claim on the lease (an ack, nack or extend under way) is passed
    // over, not waited for: the receive has other messages to take.
    auto rev = client_.put_if(key, l.encode(), cur ? cur->revision : 0, Client::OnClaim::Pass);
    if (!rev) continue;
    if (fifo && !groups_->alone(queue, subject, seq, now)) {
      // A redrive put an earlier message into the group (or leased one)
      // while this was admitted: the lease goes back to what it was, and the
      // delivery waits for its turn.
      if (cur)
        client_.put_if(key, prev.encode(), *rev);
      else
        client_.remove(*rev);
      groups_->pass(queue, subject, seq, reply, now, ack_wait);
      return std::nullopt;
    }
    return handed_out(queue, msg, meta->Stream, seq, l, vt, ack_wait, group);
  }
  return std::nullopt;  // others kept changing the lease: leave the message to them
}

Lease LeaseBook::new_lease(const Lease* prev, Millis now, Millis vt, const std::string& reply,
                           std::string group, std::vector<Attempt> history) {
  Lease l;
  l.state = Lease::Leased;
  do l.nonce = random_();
  while (l.nonce == 0);
  l.until = now + vt;
  l.received_at = now;
  l.first_received_at = prev && prev->receives > 0 ? prev->first_received_at : now;
  l.receives = (prev ? prev->receives : 0) + 1;
  l.reply = reply;
  if (prev) l.reason = prev->reason;
  l.group = std::move(group);
  l.pid = pid_;
  l.worker_since = worker_since_;
  l.holder = holder_;
  l.history = std::move(history);
  return l;
}

Message LeaseBook::handed_out(const std::string& queue, natsMsg* msg, const std::string& stream,
                              std::uint64_t seq, const Lease& l, Millis vt, Millis ack_wait,
                              const std::string& group) {
  if (counters_) count(queue, counter::kReceived, event_id("rc", stream, seq, l.nonce));
  if (vt != ack_wait) client_.request(l.reply, nak_body(vt));
  Message m = message_of(msg, seq);
  if (!group.empty()) m.group = json::parse(group);
  m.receipt = q::receipt(seq, l.nonce);
  m.receive_count = l.receives;
  m.state = MessageState::InFlight;
  m.visible_at = l.until;
  m.first_received_at = l.first_received_at;
  m.last_received_at = l.received_at;
  m.reason = l.reason;
  m.attempts.clear();
  return m;
}

std::vector<std::optional<Message>> LeaseBook::take_first_deliveries(
    const std::string& queue, const std::vector<natsMsg*>& msgs, Millis vt, Millis ack_wait,
    std::vector<bool>& taken) {
  std::vector<std::optional<Message>> out(msgs.size());
  taken.assign(msgs.size(), false);
  struct Planned {
    std::size_t i;
    std::uint64_t seq;
    std::string stream;
    Lease lease;
  };
  std::vector<Planned> planned;
  std::vector<Write> writes;
  Millis now = clock_.now();
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    natsMsg* msg = msgs[i];
    // Only the plain case: never delivered before, not delayed, no group,
    // and (the CAS below decides) no lease yet. take() decides every other.
    if (!header(msg, "Q-Group").empty() || header_visible_at(msg) > now) continue;
    jsMsgMetaData* meta_raw = nullptr;
    if (natsMsg_GetMetaData(&meta_raw, msg) != NATS_OK) continue;
    MetaPtr meta(meta_raw);
    if (meta->NumDelivered != 1) continue;
    const char* reply = natsMsg_GetReply(msg);
    if (!reply) continue;
    std::uint64_t seq = meta->Sequence.Stream;
    Lease l =
        new_lease(nullptr, now, vt, reply, {}, attempts_from_header(header(msg, "Q-History")));
    writes.push_back({Names::lease_key(queue, seq), l.encode(), 0});
    planned.push_back({i, seq, meta->Stream, std::move(l)});
  }
  if (planned.size() < 2) return out;
  std::vector<std::exception_ptr> errors;
  auto written = put_if_together(client_, writes, Client::OnClaim::Pass, &errors);
  std::exception_ptr busy;
  for (std::size_t k = 0; k < planned.size(); ++k) {
    const auto& p = planned[k];
    try {
      if (errors[k]) std::rethrow_exception(errors[k]);
      if (!written[k]) continue;  // another receive came first: take() reads again
      out[p.i] = handed_out(queue, msgs[p.i], p.stream, p.seq, p.lease, vt, ack_wait, {});
      taken[p.i] = true;
    } catch (const Error& e) {
      // As a failure of take(): a cluster that stops answering ends the
      // receive (after the others are handed out); any other failure
      // leaves this delivery to take(), which reads its lease and passes
      // over it or reports it.
      if (e.kind() == ErrorKind::Busy || e.kind() == ErrorKind::Permission) {
        if (!busy) busy = std::current_exception();
      }
    }
  }
  if (busy) std::rethrow_exception(busy);
  return out;
}

bool LeaseBook::present(const std::string& stream, std::uint64_t seq) {
  MsgPtr msg = client_.stored_message(stream, seq, "reading message " + q::message_id(seq));
  if (!msg) return false;
  return true;
}

void LeaseBook::finish_acks(const std::string& stream, const std::vector<Finish>& acks) {
  if (acks.size() == 1) return finish_ack(stream, acks[0].seq, acks[0].reply, acks[0].revision);
  try {
    std::vector<Request> requests;
    for (const auto& a : acks) requests.push_back({a.reply, "+ACK", {}});
    auto answers = request_together(client_, requests);
    for (std::size_t i = 0; i < acks.size(); ++i)
      if (!answers[i] || !header(answers[i].get(), "Status").empty())
        client_.request(acks[i].reply, "+ACK");
    // As finish_ack: each lease goes once its message is gone.
    std::vector<Finish> waiting = acks;
    for (int attempt = 0; attempt < 40 && !waiting.empty(); ++attempt) {
      std::vector<std::uint64_t> seqs;
      for (const auto& a : waiting) seqs.push_back(a.seq);
      auto present = present_together(client_, stream, seqs);
      std::vector<std::uint64_t> gone;
      std::vector<Finish> still;
      for (std::size_t i = 0; i < waiting.size(); ++i)
        if (present[i])
          still.push_back(waiting[i]);
        else
          gone.push_back(waiting[i].revision);
      if (!gone.empty()) {
        kill_point("ack-sent");
        remove_together(client_, gone);
      }
      waiting = std::move(still);
      if (!waiting.empty())
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 * (attempt + 1), 50)));
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Busy) throw;
  }
}

void LeaseBook::finish_ack(const std::string& stream, std::uint64_t seq, const std::string& reply,
                           std::uint64_t revision) {
  try {
    client_.request(reply, "+ACK");
    // The stream drops an acked message of a work queue as the ack is
    // applied; wait (briefly) until its leader no longer has it.
    for (int attempt = 0; attempt < 40; ++attempt) {
      if (!present(stream, seq)) {
        kill_point("ack-sent");
        client_.remove(revision);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 * (attempt + 1), 50)));
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Busy) throw;
  }
}

// Moves JetStream's redelivery of a pending message to now + delay. Once
// the lease is written the decision stands: when the cluster does not
// answer, the lease still rules (a delivery before its time is re-armed by
// the receive that gets it), so this reports no failure.
void LeaseBook::rearm(const std::string& reply, Millis delay) {
  try {
    client_.request(reply, nak_body(delay));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Busy) throw;
  }
}

// The lease a receipt names, when it is still that delivery's; else
// Error(Stale) saying why, or Error(InvalidData) for a malformed receipt.
std::uint64_t LeaseBook::receipt_seq(const std::string& receipt) {
  auto parsed = q::parse_receipt(receipt);
  if (!parsed)
    throw Error(ErrorKind::InvalidData,
                fmt::format("receipt '{}': malformed (expected the receipt printed by 'q "
                            "receive', like m1f.0123456789abcdef)",
                            receipt));
  return parsed->seq;
}

LeaseBook::Current LeaseBook::current(const std::string& queue, const std::string& receipt) {
  return current(receipt, client_.get(Names::lease_key(queue, receipt_seq(receipt))), queue);
}

LeaseBook::Current LeaseBook::current(const std::string& receipt, std::optional<Record> cur,
                                      const std::string& queue) {
  receipt_seq(receipt);  // Error(InvalidData) when malformed
  const auto parsed = q::parse_receipt(receipt);
  auto id = q::message_id(parsed->seq);
  if (!cur)
    throw Error(ErrorKind::Stale,
                fmt::format("receipt {}: stale: message {} is no longer in queue {} (acked, "
                            "purged or expired)",
                            receipt, id, queue));
  Lease lease = Lease::decode(cur->value);
  if (lease.nonce != parsed->nonce || lease.state == Lease::Acked || lease.state == Lease::Dead) {
    if (lease.state == Lease::Dead)
      throw Error(ErrorKind::Stale, fmt::format("receipt {}: stale: message {} was moved to the "
                                                "dead letters of queue {}",
                                                receipt, id, queue));
    if (lease.state == Lease::Acked)
      throw Error(ErrorKind::Stale, fmt::format("receipt {}: stale: message {} is no longer "
                                                "in queue {} (acked, purged or expired)",
                                                receipt, id, queue));
    throw Error(ErrorKind::Stale,
                fmt::format("receipt {}: stale: message {} was delivered again since (receive "
                            "count now {})",
                            receipt, id, lease.receives));
  }
  if (lease.state == Lease::Released)
    throw Error(ErrorKind::Stale,
                fmt::format("receipt {}: stale: message {} was released (nack) after this "
                            "receipt was issued",
                            receipt, id));
  return {parsed->seq, std::move(lease), cur->revision};
}

// Writes `next` over the lease at `revision`; when another write came
// first, reads again: the receipt may have gone stale meanwhile.
std::uint64_t LeaseBook::change(const std::string& queue, const std::string& receipt,
                                std::uint64_t seq, Lease next, std::uint64_t revision) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (auto rev = client_.put_if(Names::lease_key(queue, seq), next.encode(), revision))
      return *rev;
    auto again = current(queue, receipt);  // throws Stale when it went stale
    revision = again.revision;
  }
  throw Error(ErrorKind::Busy,
              fmt::format("receipt {}: its lease kept changing; try again", receipt));
}

// The events of the delivery `prev` ended and of its nack, again: a process
// killed between its lease write and its event left them uncounted; counted
// already (within the window), the same id counts once. Published at once,
// never with the receive's counts: the lease written next replaces `prev`,
// and with it the last trace of these events.
void LeaseBook::recount(const std::string& queue, const std::string& stream, std::uint64_t seq,
                        const Lease& prev, Millis now) {
  if (prev.nonce == 0 || prev.receives == 0) return;  // delayed at its send: never received
  if (now - prev.received_at < kRecountWithin)
    counters_->count(queue, counter::kReceived, event_id("rc", stream, seq, prev.nonce));
  if (prev.state == Lease::Released && !prev.history.empty() &&
      prev.history.back().end == AttemptEnd::Released &&
      prev.history.back().reason != kHolderDied &&  // not a nack (nats/holders.hpp)
      prev.history.back().receive == prev.receives &&
      now - prev.history.back().ended_at < kRecountWithin)
    counters_->count(queue, counter::kNacked, event_id("nk", stream, seq, prev.nonce));
}

Attempt LeaseBook::ended(const Lease& lease, AttemptEnd end, const std::string& reason,
                         const RunReport& run) {
  Attempt a;
  a.receive = lease.receives;
  a.received_at = lease.received_at;
  a.pid = lease.pid;
  a.worker_since = lease.worker_since;
  if (workers_ && lease.worker_since != 0)
    a.command = workers_->command(lease.pid, lease.worker_since);
  a.end = end;
  a.ended_at = clock_.now();
  a.reason = reason;
  a.run = run;
  return a;
}

void LeaseBook::dead_letter(const std::string& queue, const std::string& stream,
                            const std::string& receipt, const std::string& reason,
                            const RunReport& run) {
  auto cur = current(queue, receipt);
  // The stored message: the delivery's copy is gone with the receive that had it.
  MsgPtr msg = client_.stored_message(stream, cur.seq, "reading message " + q::message_id(cur.seq));
  if (!msg)
    throw Error(ErrorKind::Stale, fmt::format("receipt {}: stale: message {} is no longer in "
                                              "queue {} (acked, purged or expired)",
                                              receipt, q::message_id(cur.seq), queue));
  Lease dead = cur.lease;
  dead.state = Lease::Dead;
  dead.until = clock_.now();
  dead.reason = reason;
  add_attempt(dead.history, ended(cur.lease, AttemptEnd::DeadLettered, reason, run));
  auto rev = change(queue, receipt, cur.seq, dead, cur.revision);
  dead_.finish(queue, msg.get(), cur.seq, dead, rev, cur.lease.reply);
  // A FIFO head moved: its group's next message goes now.
  if (!cur.lease.group.empty() && groups_) groups_->wake(queue, cur.lease.group, clock_.now());
}

}  // namespace q::nats
