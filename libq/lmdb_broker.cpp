#include "lmdb_broker.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>
#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "file_watch.hpp"
#include "lmdb_history.hpp"
#include "lmdb_pause.hpp"
#include "lmdb_receive.hpp"
#include "lmdb_transfer.hpp"
#include "lmdb_verify.hpp"
#include "queue_view.hpp"
#include "records.hpp"
#include "rules.hpp"
#include "sha256.hpp"
#include "timefmt.hpp"
#include "utf8.hpp"

namespace q {
namespace {

// Sends of at least this many messages first commit a small change (see
// commit_small_change).
constexpr std::size_t kBulkSend = 1000;

[[noreturn]] void no_such_queue(const std::string& queue) {
  throw Error(ErrorKind::NotFound, fmt::format("queue {}: no such queue", queue))
      .with_remedy(Remedy::CreateQueue, queue);
}

class LmdbBroker final : public Broker {
 public:
  LmdbBroker(std::unique_ptr<store::Env> env, const Clock* clock,
             std::function<std::uint64_t()> random, HolderProbe holder_alive)
      : env_(std::move(env)),
        clock_(clock ? clock : &system_clock_),
        random_(std::move(random)),
        holder_alive_(holder_alive ? std::move(holder_alive) : HolderProbe(q::holder_alive)) {
    if (!random_) {
      std::random_device device;
      std::seed_seq seed{device(), device(), device(), device()};
      engine_.seed(seed);
      random_ = [this] { return engine_(); };
    }
  }

  bool do_create_queue(const std::string& queue, const ConfigChange& change) override {
    QueueConfig wanted = apply(QueueConfig{}, change);
    Txn txn(*env_, Txn::Write);
    if (auto existing = load(txn, queue)) {
      check_agrees(queue, existing->config, change);
      return false;
    }
    QueueRecord rec;
    check_new_queue_name(queue);
    rec.qid = next_qid(txn);
    rec.created_at = clock_->now();
    rec.config = wanted;
    txn.put(db().queues, queue, store::encode(rec));
    txn.commit();
    return true;
  }

  QueueConfig do_configure(const std::string& queue, const ConfigChange& change) override {
    if (change.empty()) {
      Txn txn(*env_, Txn::Read);
      return must_load(txn, queue).config;
    }
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    check_kind_kept(queue, view.rec.config, change);
    QueueConfig config = apply(view.rec.config, change);
    validate(config);
    // The shared rate state belongs to the old rate: an hour's wait earned at
    // 1/h must not hold back starts at 100/s.
    if (config.rate != view.rec.config.rate) view.rec.rate_tat_us = 0;
    view.rec.config = config;
    view.save();
    txn.commit();
    return config;
  }

  RemovedCounts do_delete_queue(const std::string& queue) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    RemovedCounts removed;
    removed.messages = purge_live(view);
    removed.dead_letters = purge_dead(view);
    for (MDB_dbi dbi : {db().dedup, db().dedup_expiry, db().done, db().done_expiry, db().groups,
                        db().group_messages, db().heads}) {
      for (const auto& key : keys_with_prefix(txn, dbi, view.prefix)) txn.del(dbi, key);
    }
    drop_queue_holders(txn, view.rec.qid);
    txn.del(db().pauses, view.prefix);
    txn.del(db().queues, queue);
    txn.commit();
    return removed;
  }

  std::vector<std::string> do_list_queues() override {
    Txn txn(*env_, Txn::Read);
    std::vector<std::string> names;
    Cursor c(txn, db().queues);
    for (bool ok = c.first(); ok; ok = c.next()) names.emplace_back(c.key());
    return names;
  }

  std::vector<SendResult> do_send(const std::string& queue, std::vector<OutgoingMessage> messages,
                                  const SendOptions& options) override {
    if (messages.size() >= kBulkSend) commit_small_change(queue);
    Txn txn(*env_, Txn::Write);
    auto results = send_in(txn, queue, std::move(messages), options);
    txn.commit();
    return results;
  }

  // A send inside the caller's write transaction (send, ack_and_send).
  std::vector<SendResult> send_in(Txn& txn, const std::string& queue,
                                  std::vector<OutgoingMessage> messages,
                                  const SendOptions& options) {
    auto existing = load(txn, queue);
    if (!existing) {
      if (!options.create_queue) no_such_queue(queue);
      QueueRecord rec;
      check_new_queue_name(queue);
      rec.qid = next_qid(txn);
      rec.created_at = clock_->now();
      existing = rec;
    }
    QueueView view(txn, db(), queue, std::move(*existing), clock_->now());
    view.holder_alive = &holder_alive_;
    view.maintain();
    const auto& config = view.rec.config;
    check_send_against(queue, config, messages, options);
    if (config.content_dedup)
      for (auto& m : messages)
        if (m.dedup_id.empty()) m.dedup_id = sha256_hex(m.body);

    Millis visible_at = view.now + config.delay;
    if (options.delay) visible_at = view.now + *options.delay;
    if (options.at) visible_at = std::max(view.now, *options.at);
    if (visible_at - view.now >= config.retention)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("queue {}: a message visible at {} is further ahead than the "
                              "queue's retention ({})",
                              queue, format_time(visible_at), format_duration(config.retention)));

    // Duplicates of earlier sends, or of earlier messages of this batch, store nothing.
    std::vector<std::optional<std::uint64_t>> duplicate_of(messages.size());
    std::uint64_t fresh = 0;
    {
      std::unordered_set<std::string_view> in_batch;
      for (std::size_t i = 0; i < messages.size(); ++i) {
        const auto& dedup_id = messages[i].dedup_id;
        if (!dedup_id.empty()) {
          duplicate_of[i] = view.find_dedup(dedup_id);
          if (!duplicate_of[i] && !in_batch.insert(dedup_id).second) duplicate_of[i] = 0;
        }
        if (!duplicate_of[i]) ++fresh;
      }
    }
    if (config.max_depth != 0 && view.depth() + fresh > config.max_depth)
      throw Error(ErrorKind::Full,
                  fmt::format("queue {}: full ({} of max depth {} messages); {} more would not "
                              "fit, nothing was sent",
                              queue, view.depth(), config.max_depth, fresh));

    std::uint64_t seq = meta_u64(txn, store::kNextSeqKey);
    std::vector<SendResult> results;
    results.reserve(messages.size());
    std::unordered_map<std::string_view, std::uint64_t> batch_seq;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      auto& m = messages[i];
      if (duplicate_of[i]) {
        std::uint64_t first = *duplicate_of[i] != 0 ? *duplicate_of[i] : batch_seq.at(m.dedup_id);
        results.push_back({store::message_id(first), true});
        ++view.rec.counters.deduplicated;
        continue;
      }
      Header header;
      header.sent_at = view.now;
      header.visible_at = visible_at;
      header.available_at = visible_at;
      header.flags = visible_at > view.now ? Header::kDelayed : 0;
      header.group = m.group;
      QueueView::GroupEdit group(view, m.group);
      view.put_header(db().messages, seq, header);
      view.link(seq, header);
      group.added(seq);
      group.done();
      txn.put(db().age, store::key_q_time_seq(view.rec.qid, visible_at, seq), {});
      if (!m.dedup_id.empty()) {
        view.remember_dedup(m.dedup_id, seq);
        batch_seq.emplace(m.dedup_id, seq);
      }
      // Sequence numbers only grow, so bodies are always appended.
      store::Body body{std::move(m.attributes), m.dedup_id, std::move(m.body)};
      txn.put(db().bodies, store::key_seq(seq), store::encode(body), MDB_APPEND);
      results.push_back({store::message_id(seq), false});
      ++view.rec.counters.sent;
      ++seq;
    }
    set_meta_u64(txn, store::kNextSeqKey, seq);
    view.save();
    return results;
  }

  // Acks one delivery inside `view`'s transaction; a stale or malformed
  // receipt is an outcome (nothing written), not an exception.
  static ReceiptResult ack_in(QueueView& view, const std::string& receipt) {
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
    }
    return result;
  }

  AckSendResult do_ack_and_send(const std::string& queue, const std::string& receipt,
                                const std::string& to, std::vector<OutgoingMessage> messages,
                                const SendOptions& options) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    AckSendResult result;
    auto acked = ack_in(view, receipt);
    if (acked.outcome != ReceiptOutcome::Done) {
      // Nothing is written: the output of a run whose lease was lost is not sent.
      result.outcome = acked.outcome;
      result.detail = acked.detail;
      return result;
    }
    view.save();
    result.sent = send_in(txn, to, std::move(messages), options);
    txn.commit();
    return result;
  }

  std::vector<Message> do_receive(const std::string& queue,
                                  const ReceiveOptions& options) override {
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

  Millis do_next_delivery(const std::string& queue, bool rate_limited) override {
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

  std::unique_ptr<ChangeWatch> do_watch() override {
    return std::make_unique<FileWatch>(env_->path());
  }

  void do_dead_letter(const std::string& queue, const std::string& receipt,
                      const std::string& reason, const RunReport& run) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto [seq, header] = view.current_delivery(receipt);
    close_attempt(view, seq, header, AttemptEnd::DeadLettered, view.now, reason, run);
    view.dead_letter(seq, std::move(header), std::string(utf8_prefix(reason, kMaxReason)));
    view.save();
    txn.commit();
  }

  ReceiptOutcome do_ack_done(const std::string& queue, const std::string& receipt,
                             const std::string& key, Millis keep) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto acked = ack_in(view, receipt);
    if (acked.outcome == ReceiptOutcome::Malformed)
      throw Error(ErrorKind::InvalidData, acked.detail);
    // Stale: the work was done all the same; recorded, so a repeat is skipped.
    remember_done(view, key, keep);
    view.save();
    txn.commit();
    return acked.outcome;
  }

  bool do_is_done(const std::string& queue, const std::string& key) override {
    Txn txn(*env_, Txn::Read);
    auto rec = must_load(txn, queue);
    auto entry = txn.get(db().done, store::key_q_bytes(rec.qid, key));
    if (!entry) return false;
    auto done = store::decode_done(*entry, txn.format());
    if (!done) damaged_meta(fmt::format("queue {}: the done entry of key {}", queue, key));
    return done->expires > clock_->now();
  }

  std::vector<ReceiptResult> do_ack(const std::string& queue,
                                    const std::vector<std::string>& receipts) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto results = ack_each(view, receipts);
    view.save();
    txn.commit();
    return results;
  }

  // A receipt given twice is acked once and reported the same both times.
  static std::vector<ReceiptResult> ack_each(QueueView& view,
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

  // The acks first: an ack that frees a FIFO group lets this receive take
  // the group's next message.
  AckReceiveResult do_ack_and_receive(const std::string& queue,
                                      const std::vector<std::string>& receipts,
                                      const ReceiveOptions& options) override {
    AckReceiveResult result;
    result.received = receive_now(queue, options, &receipts, &result.acked);
    return result;
  }

  Millis do_extend(const std::string& queue, const std::string& receipt, Millis by) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto [seq, header] = view.current_delivery(receipt);
    Millis until = view.now + by;
    check_extend_limit(receipt, until, header.last_received_at);
    QueueView::GroupEdit group(view, header.group);
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

  Millis do_nack(const std::string& queue, const std::string& receipt,
                 const NackOptions& options) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto [seq, header] = view.current_delivery(receipt);
    Millis delay = options.delay;
    if (options.backoff) {
      double unit = static_cast<double>(random_() >> 11) * 0x1.0p-53;
      delay = backoff_delay(options.backoff_base, options.backoff_cap, header.receive_count, unit);
    }
    QueueView::GroupEdit group(view, header.group);
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
    return header.visible_at;
  }

  void do_pause(const std::string& queue, Millis until, const std::string& reason) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    if (until != 0 && until <= view.now)
      throw Error(ErrorKind::Usage, "--for: the pause must end in the future");
    Pause p{view.now, until, reason};
    txn.put(db().pauses, view.prefix, store::encode(p));
    txn.commit();
  }

  std::optional<Pause> do_resume(const std::string& queue) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    auto was = active_pause(txn, db(), view.rec.qid, queue, view.now);
    if (!txn.del(db().pauses, view.prefix)) return std::nullopt;
    txn.commit();
    return was;
  }

  std::vector<Message> do_peek(const std::string& queue, std::size_t max) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    auto found = view.headers(db().messages, "the record of message", max);
    std::vector<Message> out;
    for (auto& [seq, header] : found)
      out.push_back(to_message(seq, header, view.body(seq), state_of(header, view.now)));
    return out;
  }

  std::uint64_t do_purge(const std::string& queue) override {
    return purge_with(queue, &LmdbBroker::purge_live);
  }

  std::vector<QueueStats> do_stats(const std::string& queue) override {
    Txn txn(*env_, Txn::Read);
    Millis now = clock_->now();
    std::vector<QueueStats> out;
    auto add = [&](const std::string& name, const QueueRecord& rec) {
      out.push_back(queue_stats(txn, name, rec, now));
    };
    if (!queue.empty()) {
      add(queue, must_load(txn, queue));
      return out;
    }
    Cursor c(txn, db().queues);
    for (bool ok = c.first(); ok; ok = c.next()) {
      std::string name(c.key());
      auto rec = store::decode_queue(c.value());
      if (!rec) damaged_queue(name);
      add(name, *rec);
    }
    return out;
  }

  std::vector<Message> do_dead_letters(const std::string& queue, std::size_t max) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    std::vector<Message> out;
    for (auto& [seq, header] : dead_headers(view, max))
      out.push_back(to_message(seq, header, view.body(seq), MessageState::Dead));
    return out;
  }

  void do_each_dead_letter(const std::string& queue,
                           const std::function<bool(const Message&)>& each) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    view.each_header(db().dead, "the dead letter", [&](std::uint64_t seq, const Header& header) {
      auto message = to_message(seq, header, view.body(seq), MessageState::Dead);
      message.attempts = read_history(txn, db(), seq, header, view.now);
      view.release_body(seq);
      return each(message);
    });
  }

  std::uint64_t do_purge_dead_letters(const std::string& queue) override {
    return purge_with(queue, &LmdbBroker::purge_dead);
  }

  std::vector<Message> do_redrive(const std::string& queue,
                                  const RedriveOptions& options) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto chosen = redrive_choice(view, options);
    std::vector<Message> out;
    for (auto& [seq, header] : chosen)
      out.push_back(to_message(seq, header, view.body(seq), MessageState::Dead));

    std::optional<QueueView> target;
    if (!options.to.empty() && options.to != queue) {
      target.emplace(txn, db(), options.to, must_load(txn, options.to), view.now);
      target->maintain();
    }
    QueueView& into = target ? *target : view;
    check_redrivable(into, chosen, out);
    if (options.dry_run) return out;

    const auto& config = into.rec.config;
    if (config.max_depth != 0 && into.depth() + chosen.size() > config.max_depth)
      throw Error(ErrorKind::Full,
                  fmt::format("queue {}: {} dead letters would not fit under max depth {} ({} "
                              "waiting); nothing was redriven (try --max)",
                              into.name, chosen.size(), config.max_depth, into.depth()));
    for (auto& [seq, header] : chosen) {
      view.unfile_dead(seq, header);
      into.revive(seq, header);
      ++view.rec.counters.redriven;
    }
    view.save();
    if (target) target->save();
    txn.commit();
    return out;
  }

  // The dead letters a redrive moves: the oldest, or those named by id.
  std::vector<std::pair<std::uint64_t, Header>> redrive_choice(QueueView& view,
                                                               const RedriveOptions& options) {
    if (options.ids.empty()) return dead_headers(view, options.max.value_or(SIZE_MAX));
    std::vector<std::pair<std::uint64_t, Header>> chosen;
    std::unordered_set<std::uint64_t> named;  // an id given twice moves once
    for (const auto& id : options.ids) {
      auto seq = parse_id(id, "id");
      if (!named.insert(seq).second) continue;
      auto header = view.find_header(db().dead, seq);
      if (!header) {
        if (options.skip_missing) continue;
        throw Error(
            ErrorKind::NotFound,
            fmt::format("queue {}: no dead letter {}; nothing was redriven", view.name, id));
      }
      if (options.max && chosen.size() >= *options.max) break;
      chosen.emplace_back(seq, std::move(*header));
    }
    return chosen;
  }

  // A redriven message enters the target as a send would: the target's rules
  // apply. Throws before anything moved.
  static void check_redrivable(const QueueView& into,
                               const std::vector<std::pair<std::uint64_t, Header>>& chosen,
                               const std::vector<Message>& out) {
    if (into.rec.config.fifo)
      for (const auto& [seq, header] : chosen)
        if (header.group.empty())
          throw Error(ErrorKind::InvalidData,
                      fmt::format("queue {}: is a FIFO queue and dead letter {} has no group; "
                                  "nothing was redriven",
                                  into.name, store::message_id(seq)));
    for (const auto& m : out) {
      check_body_size(into.name, into.rec.config, m.body.size(), "dead letter " + m.id, "redriven");
      // Stored attributes keep the form they were accepted in (older files
      // may hold repeated keys or bytes that are not UTF-8); what would make
      // the message unrunnable is refused.
      check_attribute_bytes(into.name, m.attributes);
    }
  }

  std::optional<Message> do_find_dead_letter(const std::string& queue,
                                             const std::string& id) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    auto seq = parse_id(id);
    auto header = view.find_header(db().dead, seq);
    if (!header) return std::nullopt;
    auto m = to_message(seq, *header, view.body(seq), MessageState::Dead);
    m.attempts = read_history(txn, db(), seq, *header, view.now);
    return m;
  }

  std::vector<std::string> do_delete_dead_letters(const std::string& queue,
                                                  const std::vector<std::string>& ids) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    std::vector<std::string> missing;
    std::unordered_set<std::uint64_t> named;  // an id given twice is deleted once
    for (const auto& id : ids) {
      auto seq = parse_id(id);
      if (!named.insert(seq).second) continue;
      auto header = view.find_header(db().dead, seq);
      if (header)
        view.remove_dead(seq, *header);
      else
        missing.push_back(id);
    }
    view.save();
    txn.commit();
    return missing;
  }

  void do_export_messages(const std::string& queue,
                          const std::function<void(const Message&)>& each) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    export_queue(view, each);
  }

  std::vector<std::string> do_import_messages(const std::string& queue,
                                              std::vector<Message> messages, bool create_queue,
                                              bool skip_existing) override {
    Txn txn(*env_, Txn::Write);
    auto existing = load(txn, queue);
    if (!existing) {
      if (!create_queue) no_such_queue(queue);
      QueueRecord rec;
      check_new_queue_name(queue);
      rec.qid = next_qid(txn);
      rec.created_at = clock_->now();
      existing = rec;
    }
    QueueView view(txn, db(), queue, std::move(*existing), clock_->now());
    view.holder_alive = &holder_alive_;
    view.maintain();
    if (skip_existing) {
      auto present = [&](const Message& m) {
        auto seq = store::parse_message_id(m.id);
        if (!seq) return false;
        auto key = store::key_q_seq(view.rec.qid, *seq);
        return txn.get(db().messages, key).has_value() || txn.get(db().dead, key).has_value();
      };
      messages.erase(std::remove_if(messages.begin(), messages.end(), present), messages.end());
    }
    std::uint64_t next_seq = meta_u64(txn, store::kNextSeqKey);
    auto ids = import_into(view, std::move(messages), next_seq);
    set_meta_u64(txn, store::kNextSeqKey, next_seq);
    view.save();
    txn.commit();
    return ids;
  }

  std::optional<Message> do_show(const std::string& queue, const std::string& id) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    std::uint64_t seq = parse_id(id);
    MessageState state = MessageState::Dead;
    auto header = view.find_header(db().messages, seq);
    if (header)
      state = state_of(*header, view.now);
    else
      header = view.find_header(db().dead, seq);
    if (!header) return std::nullopt;
    auto m = to_message(seq, *header, view.body(seq), state);
    m.attempts = read_history(txn, db(), seq, *header, view.now);
    return m;
  }

  void do_register_worker(std::uint32_t pid, Millis since, const std::string& command) override {
    Txn txn(*env_, Txn::Write);
    q::register_worker(txn, db(), pid, since, command);
    txn.commit();
  }

  void do_unregister_worker(std::uint32_t pid, Millis since) override {
    Txn txn(*env_, Txn::Write);
    q::unregister_worker(txn, db(), pid, since);
    txn.commit();
  }

  void do_backup(const std::string& path) override { env_->copy_to(path); }

  std::vector<std::string> do_verify() override {
    Txn txn(*env_, Txn::Read);
    auto problems = store::verify_file(txn, db(), clock_->now());
    for (auto& problem : verify_holders(txn, db())) problems.push_back(std::move(problem));
    return problems;
  }

 private:
  const store::Databases& db() const { return env_->db(); }

  // LMDB never reuses in a transaction the pages the one before it freed (that
  // snapshot must survive a crash). A bulk send right after a drain would grow
  // the file by every page the drain's last ack freed; one small commit first
  // makes them reusable.
  void commit_small_change(const std::string& queue) {
    Txn txn(*env_, Txn::Write);
    auto rec = load(txn, queue);
    if (!rec) return;
    QueueView view(txn, db(), queue, std::move(*rec), clock_->now());
    view.holder_alive = &holder_alive_;
    view.maintain();
    view.save();
    txn.commit();
  }

  std::optional<QueueRecord> load(Txn& txn, const std::string& queue) {
    check_queue_name(queue);
    auto bytes = txn.get(db().queues, queue);
    if (!bytes) return std::nullopt;
    auto rec = store::decode_queue(*bytes);
    if (!rec) damaged_queue(queue);
    return rec;
  }

  QueueRecord must_load(Txn& txn, const std::string& queue) {
    auto rec = load(txn, queue);
    if (!rec) no_such_queue(queue);
    return std::move(*rec);
  }

  QueueView open(Txn& txn, const std::string& queue) {
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    view.holder_alive = &holder_alive_;
    return view;
  }

  [[noreturn]] void damaged_queue(const std::string& queue) const {
    throw Error(ErrorKind::Io,
                fmt::format("{}: queue {}: its record is damaged (checksum mismatch)", env_->path(),
                            queue));
  }

  void remember_done(QueueView& view, const std::string& key, Millis keep) {
    Millis expires = view.now + keep;
    auto done_key = store::key_q_bytes(view.rec.qid, key);
    if (auto old = view.txn.get(db().done, done_key)) {
      auto old_done = store::decode_done(*old, view.txn.format());
      if (!old_done)
        damaged_meta(fmt::format("queue {}: the done entry of key {}", view.name, key));
      view.txn.del(db().done_expiry, store::key_q_time_bytes(view.rec.qid, old_done->expires, key));
    }
    view.txn.put(db().done, done_key, store::encode(store::DoneRecord{expires}));
    view.txn.put(db().done_expiry, store::key_q_time_bytes(view.rec.qid, expires, key), {});
  }

  std::uint32_t next_qid(Txn& txn) {
    auto qid = static_cast<std::uint32_t>(meta_u64(txn, store::kNextQidKey));
    set_meta_u64(txn, store::kNextQidKey, qid + 1);
    return qid;
  }

  std::uint64_t meta_u64(Txn& txn, const char* key) {
    auto bytes = txn.get(db().meta, key);
    if (!bytes) return 1;
    auto v = store::decode_meta_number(*bytes, txn.format());
    if (!v) damaged_meta(fmt::format("meta {}", key));
    return *v;
  }

  void set_meta_u64(Txn& txn, const char* key, std::uint64_t v) {
    txn.put(db().meta, key, store::encode_meta_number(v));
  }

  [[noreturn]] void damaged_meta(const std::string& what) const {
    throw Error(ErrorKind::Io, fmt::format("{}: {}: damaged (checksum mismatch); run 'q verify' "
                                           "or restore a backup",
                                           env_->path(), what));
  }

  static std::vector<std::string> keys_with_prefix(Txn& txn, MDB_dbi dbi,
                                                   const std::string& prefix) {
    std::vector<std::string> keys;
    Cursor c(txn, dbi);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next())
      keys.emplace_back(c.key());
    return keys;
  }

  std::vector<std::pair<std::uint64_t, Header>> dead_headers(QueueView& view, std::size_t max) {
    return view.headers(db().dead, "the dead letter", max);
  }

  // Removes with `remove` (purge_live or purge_dead) in one write transaction.
  std::uint64_t purge_with(const std::string& queue,
                           std::uint64_t (LmdbBroker::*remove)(QueueView&)) {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    auto removed = (this->*remove)(view);
    view.save();
    txn.commit();
    return removed;
  }

  std::uint64_t purge_live(QueueView& view) {
    auto all = view.headers(db().messages, "the record of message");
    for (const auto& [seq, header] : all) view.remove_live(seq, header);
    return all.size();
  }

  std::uint64_t purge_dead(QueueView& view) {
    auto all = dead_headers(view, SIZE_MAX);
    for (const auto& [seq, header] : all) view.remove_dead(seq, header);
    return all.size();
  }

  // Counts of a queue as of `now`: the record's counts are as of its last write
  // transaction, so entries of `leases` and `delayed` that have come due since
  // are counted as visible. Every write moves them, so this stays short.
  QueueStats queue_stats(Txn& txn, const std::string& name, const QueueRecord& rec, Millis now) {
    auto prefix = store::key_q(rec.qid);
    // FIFO: leases that ran out, per group; a group whose every delivery in
    // flight ran out is no longer held.
    std::unordered_map<std::string, std::uint64_t> lapsed_in_group;
    auto count_due = [&](MDB_dbi dbi) {
      std::uint64_t n = 0;
      Cursor c(txn, dbi);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
        if (store::key_time(c.key()) > now) break;
        ++n;
        if (dbi != db().leases || !rec.config.fifo) continue;
        auto header =
            txn.get(db().messages, store::key_q_seq(rec.qid, store::key_time_seq(c.key())));
        if (auto decoded = header ? store::decode_header(*header) : std::nullopt)
          ++lapsed_in_group[decoded->group];
      }
      return n;
    };
    QueueStats s;
    s.name = name;
    s.config = rec.config;
    s.created_at = rec.created_at;
    s.counters = rec.counters;
    auto leases_due = std::min(count_due(db().leases), rec.leased);
    auto delays_due = std::min(count_due(db().delayed), rec.delayed);
    s.visible = rec.ready + leases_due + delays_due;
    s.in_flight = rec.leased - leases_due;
    s.delayed = rec.delayed - delays_due;
    s.dead = rec.dead;
    s.groups = rec.groups;
    s.held_groups = rec.held_groups;
    for (const auto& [group, lapsed] : lapsed_in_group) {
      auto bytes = txn.get(db().groups, store::key_q_bytes(rec.qid, group));
      auto g = bytes ? store::decode_group(*bytes, txn.format()) : std::nullopt;
      if (g && g->in_flight > 0 && lapsed >= g->in_flight && s.held_groups > 0) --s.held_groups;
    }
    s.pause = active_pause(txn, db(), rec.qid, name, now);
    Cursor age(txn, db().age);
    if (age.seek(prefix) && age.has_prefix(prefix)) {
      Millis available = store::key_time(age.key());
      if (available <= now) s.oldest_age = now - available;
    }
    return s;
  }

  // With `acks`, acks those receipts first in the same transaction (results
  // into `acked`): ack_and_receive.
  std::vector<Message> receive_now(const std::string& queue, const ReceiveOptions& options,
                                   const std::vector<std::string>* acks = nullptr,
                                   std::vector<ReceiptResult>* acked = nullptr) {
    Txn txn(*env_, Txn::Write);
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
    auto deliver = [&](std::uint64_t seq, Header header, QueueView::GroupEdit* group) {
      close_lapsed(view, seq, header);
      if (config.max_receives != 0 && header.receive_count >= config.max_receives) {
        std::string reason = header.reason.empty() ? "not acknowledged after " +
                                                         plural(header.receive_count, "receive")
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

  std::unique_ptr<store::Env> env_;
  SystemClock system_clock_;
  const Clock* clock_;
  std::function<std::uint64_t()> random_;
  HolderProbe holder_alive_;
  std::mt19937_64 engine_;
};

}  // namespace

std::unique_ptr<Broker> open_lmdb_broker(const LmdbOptions& options) {
  auto env = store::Env::open(options.open);
  return std::make_unique<LmdbBroker>(std::move(env), options.clock, options.random,
                                      options.holder_alive);
}

}  // namespace q
