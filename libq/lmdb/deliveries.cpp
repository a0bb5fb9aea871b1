// The LMDB backend: receiving, and what ends or extends a delivery (ack, nack,
// extend, dead-letter).
#include "libq/lmdb/broker_impl.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "libq/lmdb/file_watch.hpp"
#include "libq/lmdb/history.hpp"
#include "libq/lmdb/pause.hpp"
#include "libq/lmdb/receive.hpp"
#include "libq/rules.hpp"
#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

namespace q {

std::vector<Message> LmdbBroker::do_receive(const std::string& queue,
                                            const ReceiveOptions& options) {
  const Millis deadline = clock_->now() + std::max<Millis>(options.wait, 0);
  // Wait on the file's doorbell; watch the file itself only where the bell
  // cannot be had.
  store::Bell* bell = options.wait > 0 ? env_->bell() : nullptr;
  std::unique_ptr<FileWatch> watch;
  if (options.wait > 0 && !bell) watch = std::make_unique<FileWatch>(env_->path());
  for (;;) {
    std::uint32_t rings = bell ? bell->rings() : 0;  // before looking: no lost wake-up
    // Look first without the writer lock: an idle receiver must not write,
    // or every waiting receiver would wake every other one.
    Millis next_due = next_delivery(queue, options.rate_limited);
    Millis now = clock_->now();
    if (next_due <= now) {
      auto messages = receive_now(queue, options);
      if (!messages.empty()) return messages;
      // Another consumer was faster, or what was due went to the dead-letter queue.
    }
    now = clock_->now();
    if (now >= deadline || options.wait <= 0) return {};
    // Due but taken by another consumer (next_due may be INT64_MIN, "now"):
    // look again shortly, or when the bell rings.
    Millis sleep = next_due <= now ? 1 : std::min(deadline, next_due) - now;
    if (bell)
      bell->wait(rings, sleep);
    else
      watch->wait(sleep);
  }
}

Millis LmdbBroker::do_next_delivery(const std::string& queue, bool rate_limited) {
  Txn txn(*env_, Txn::Read);
  QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
  Millis earliest = INT64_MAX;
  // A FIFO queue delivers group heads; a lease running out frees a group.
  const bool fifo = view.rec.config.fifo;
  if (!fifo) {
    Cursor c(txn, db().ready);
    if (c.seek(view.prefix) && c.has_prefix(view.prefix)) earliest = INT64_MIN;
  }
  for (MDB_dbi dbi : {fifo ? db().heads : db().delayed, db().leases}) {
    Cursor c(txn, dbi);
    if (c.seek(view.prefix) && c.has_prefix(view.prefix))
      earliest = std::min(earliest, store::key_time(c.key()));
  }
  if (rate_limited && earliest != INT64_MAX) earliest = std::max(earliest, view.rate_ready_at());
  if (auto pause = active_pause(txn, db(), view.rec.qid, queue, view.now))
    earliest = pause->until == 0 ? INT64_MAX : std::max(earliest, pause->until);
  // A lease whose holder died is released by the next write transaction:
  // look again at the next check of the holders.
  return std::min(earliest, next_holder_check(view, holder_alive_));
}

std::unique_ptr<ChangeWatch> LmdbBroker::do_watch() {
  return std::make_unique<FileWatch>(env_->path());
}

std::vector<Message> LmdbBroker::receive_now(const std::string& queue,
                                             const ReceiveOptions& options,
                                             const std::vector<std::string>* acks,
                                             std::vector<ReceiptResult>* acked) {
  Txn txn(*env_, Txn::Write, options.sync_later);
  auto view = open(txn, queue);
  const std::string before = store::encode(view.rec);
  view.maintain();
  if (acks) *acked = ack_each(view, *acks);
  const auto& config = view.rec.config;
  Millis timeout = options.visibility_timeout.value_or(config.visibility_timeout);
  std::uint64_t budget = options.rate_limited ? view.rate_allows() : UINT64_MAX;
  std::uint64_t want = std::min<std::uint64_t>(options.max_messages, budget);
  if (active_pause(txn, db(), view.rec.qid, queue, view.now)) want = 0;
  std::vector<Message> out;
  // Delivers `seq` unless it has used up its receives; false when it went to
  // the dead-letter queue instead.
  auto deliver = [&](std::uint64_t seq, Header header, GroupEdit* group) {
    close_lapsed(view, seq, header);
    if (config.max_receives != 0 && header.receive_count >= config.max_receives) {
      std::string reason = header.reason.empty()
                               ? "not acknowledged after " + plural(header.receive_count, "receive")
                               : header.reason;
      view.dead_letter(seq, std::move(header), std::move(reason), group);
      return false;
    }
    view.unlink(seq, header);
    drop_holder(view, seq);  // of an earlier delivery
    header.receive_count += 1;
    std::uint64_t nonce;
    do nonce = random_();
    while (nonce == 0);
    header.nonce = nonce;
    if (!header.first_received_at) header.first_received_at = view.now;
    header.last_received_at = view.now;
    header.visible_at = view.now + timeout;
    header.flags = Header::kLeased;
    open_attempt(header, options.holder_pid, options.worker_since);
    view.link(seq, header);
    view.put_header(db().messages, seq, header);
    if (options.holder) hold(view, *options.holder, seq, nonce);
    if (group) group->took_flight();
    ++view.rec.counters.received;
    Message m = to_message(seq, header, view.body(seq), MessageState::InFlight);
    m.receipt = store::receipt(seq, nonce);
    out.push_back(std::move(m));
    return true;
  };
  if (config.fifo)
    pick_fifo(view, want, options.one_per_group, deliver);
  else
    pick_standard(view, want, deliver);
  if (options.rate_limited) view.rate_take(out.size());
  // Another consumer was faster: when nothing moved, commit nothing. A
  // durable commit costs a sync and wakes every waiting receiver. (Expired
  // dedup or done keys that maintain() dropped are dropped again next time.)
  if (out.empty() && store::encode(view.rec) == before) return out;
  view.save();
  txn.commit();
  return out;
}

ReceiptResult LmdbBroker::ack_in(QueueView& view, const std::string& receipt) {
  ReceiptResult result{receipt, ReceiptOutcome::Done, {}};
  try {
    auto delivery = view.current_delivery(receipt);
    view.remove_live(delivery.seq, delivery.header);
    ++view.rec.counters.acked;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Stale && e.kind() != ErrorKind::InvalidData) throw;
    result.outcome =
        e.kind() == ErrorKind::Stale ? ReceiptOutcome::Stale : ReceiptOutcome::Malformed;
    result.detail = e.what();
    if (result.outcome == ReceiptOutcome::Stale) ++view.rec.counters.stale_acks;
  }
  return result;
}

std::vector<ReceiptResult> LmdbBroker::do_ack(const std::string& queue,
                                              const std::vector<std::string>& receipts) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  auto results = ack_each(view, receipts);
  view.save();
  txn.commit();
  return results;
}

std::vector<ReceiptResult> LmdbBroker::ack_each(QueueView& view,
                                                const std::vector<std::string>& receipts) {
  std::vector<ReceiptResult> results;
  std::unordered_map<std::string_view, std::size_t> first_result;
  for (const auto& receipt : receipts) {
    if (auto seen = first_result.find(receipt); seen != first_result.end()) {
      results.push_back(results[seen->second]);
      continue;
    }
    first_result.emplace(receipt, results.size());
    results.push_back(ack_in(view, receipt));
  }
  return results;
}

AckReceiveResult LmdbBroker::do_ack_and_receive(const std::string& queue,
                                                const std::vector<std::string>& receipts,
                                                const ReceiveOptions& options) {
  AckReceiveResult result;
  result.received = receive_now(queue, options, &receipts, &result.acked);
  return result;
}

AckSendResult LmdbBroker::do_ack_and_send(const std::string& queue, const std::string& receipt,
                                          const std::string& to,
                                          std::vector<OutgoingMessage> messages,
                                          const SendOptions& options) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  AckSendResult result;
  auto acked = ack_in(view, receipt);
  if (acked.outcome != ReceiptOutcome::Done) {
    // The output of a run whose lease was lost is not sent; a stale ack is
    // counted all the same.
    result.outcome = acked.outcome;
    result.detail = acked.detail;
    if (acked.outcome == ReceiptOutcome::Stale) {
      view.save();
      txn.commit();
    }
    return result;
  }
  view.save();
  result.sent = send_in(txn, to, std::move(messages), options);
  txn.commit();
  return result;
}

std::vector<AckSendResult> LmdbBroker::do_ack_and_send_each(const std::string& queue,
                                                            const std::string& to,
                                                            std::vector<StageStep> steps,
                                                            const SendOptions& options) {
  try {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    std::vector<AckSendResult> results(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      auto acked = ack_in(view, steps[i].receipt);
      results[i].outcome = acked.outcome;
      results[i].detail = acked.detail;
    }
    view.save();
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (results[i].outcome == ReceiptOutcome::Done)
        results[i].sent = send_in(txn, to, steps[i].messages, options);
    txn.commit();
    return results;
  } catch (const Error& e) {
    if (!e.refuses_the_request()) throw;
    // DST refused one step's output and the transaction stored nothing: step
    // by step, so that only the refused one is left undone.
    return Broker::do_ack_and_send_each(queue, to, std::move(steps), options);
  }
}

ReceiptOutcome LmdbBroker::do_ack_done(const std::string& queue, const std::string& receipt,
                                       const std::string& key, Millis keep) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  auto acked = ack_in(view, receipt);
  if (acked.outcome == ReceiptOutcome::Malformed) throw Error(ErrorKind::InvalidData, acked.detail);
  // Stale: the work was done all the same; recorded, so a repeat is skipped.
  remember_done(view, key, keep);
  view.save();
  txn.commit();
  return acked.outcome;
}

bool LmdbBroker::do_is_done(const std::string& queue, const std::string& key) {
  Txn txn(*env_, Txn::Read);
  auto rec = must_load(txn, queue);
  auto entry = txn.get(db().done, store::key_q_bytes(rec.qid, key));
  if (!entry) return false;
  auto done = store::decode_done(*entry, txn.format());
  if (!done) damaged_meta(fmt::format("queue {}: the done entry of key {}", queue, key));
  return done->expires > clock_->now();
}

void LmdbBroker::remember_done(QueueView& view, const std::string& key, Millis keep) {
  Millis expires = view.now + keep;
  auto done_key = store::key_q_bytes(view.rec.qid, key);
  if (auto old = view.txn.get(db().done, done_key)) {
    auto old_done = store::decode_done(*old, view.txn.format());
    if (!old_done) damaged_meta(fmt::format("queue {}: the done entry of key {}", view.name, key));
    view.txn.del(db().done_expiry, store::key_q_time_bytes(view.rec.qid, old_done->expires, key));
  }
  view.txn.put(db().done, done_key, store::encode(store::DoneRecord{expires}));
  view.txn.put(db().done_expiry, store::key_q_time_bytes(view.rec.qid, expires, key), {});
}

Millis LmdbBroker::do_extend(const std::string& queue, const std::string& receipt, Millis by) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  auto [seq, header] = view.current_delivery(receipt);
  Millis until = view.now + by;
  check_extend_limit(receipt, until, header.last_received_at);
  GroupEdit group(view, header.group);
  // A lease that ran out but was not redelivered is taken up again.
  if (!view.unlink(seq, header)) group.took_flight();
  header.visible_at = until;
  header.flags = Header::kLeased;
  view.link(seq, header);
  view.put_header(db().messages, seq, header);
  group.done();
  view.save();
  txn.commit();
  return until;
}

NackResult LmdbBroker::do_nack(const std::string& queue, const std::string& receipt,
                               const NackOptions& options) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  auto [seq, header] = view.current_delivery(receipt);
  const auto max_receives = view.rec.config.max_receives;
  if (options.dead_letter_when_spent && max_receives != 0 && header.receive_count >= max_receives) {
    std::string reason(utf8_prefix(options.reason, kMaxReason));
    close_attempt(view, seq, header, AttemptEnd::DeadLettered, view.now, reason, options.run);
    view.dead_letter(seq, std::move(header), std::move(reason));
    view.save();
    txn.commit();
    return {0, true};
  }
  Millis delay = options.delay;
  if (options.backoff) {
    double unit = static_cast<double>(random_() >> 11) * 0x1.0p-53;
    delay = backoff_delay(options.backoff_base, options.backoff_cap, header.receive_count, unit);
  }
  GroupEdit group(view, header.group);
  if (view.unlink(seq, header)) group.left_flight();
  drop_holder(view, seq);
  header.visible_at = view.now + delay;
  header.flags = delay > 0 ? Header::kDelayed : 0;
  header.nonce = 0;  // the receipt is spent
  if (!options.reason.empty()) header.reason = options.reason;
  close_attempt(view, seq, header, AttemptEnd::Released, view.now, options.reason, options.run);
  view.link(seq, header);
  view.put_header(db().messages, seq, header);
  group.done();
  ++view.rec.counters.nacked;
  view.save();
  txn.commit();
  return {header.visible_at, false};
}

void LmdbBroker::do_dead_letter(const std::string& queue, const std::string& receipt,
                                const std::string& reason, const RunReport& run) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  auto [seq, header] = view.current_delivery(receipt);
  close_attempt(view, seq, header, AttemptEnd::DeadLettered, view.now, reason, run);
  view.dead_letter(seq, std::move(header), std::string(utf8_prefix(reason, kMaxReason)));
  view.save();
  txn.commit();
}

}  // namespace q
