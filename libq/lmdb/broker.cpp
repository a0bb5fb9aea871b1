#include "libq/lmdb/broker.hpp"
#include "libq/descendants.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "libq/lmdb/broker_impl.hpp"
#include "libq/lmdb/history.hpp"
#include "libq/lmdb/pause.hpp"
#include "libq/lmdb/verify.hpp"
#include "libq/lmdb/records.hpp"
#include "libq/rules.hpp"
#include "libq/sha256.hpp"
#include "libq/timefmt.hpp"

namespace q {
namespace {

// Sends of at least this many messages first commit a small change (see
// commit_small_change).
constexpr std::size_t kBulkSend = 1000;

[[noreturn]] void no_such_queue(const std::string& queue) {
  throw Error(ErrorKind::NotFound, fmt::format("queue {}: no such queue", queue))
      .with_remedy(Remedy::CreateQueue, queue);
}

// When the messages of a send become visible: the queue's delay, or the
// send's own delay or time; never beyond the queue's retention.
Millis send_visible_at(const QueueView& view, const SendOptions& options) {
  const auto& config = view.rec.config;
  Millis visible_at = view.now + config.delay;
  if (options.delay) visible_at = view.now + *options.delay;
  if (options.at) visible_at = std::max(view.now, *options.at);
  if (visible_at - view.now >= config.retention)
    throw Error(ErrorKind::InvalidData,
                fmt::format("queue {}: a message visible at {} is further ahead than the "
                            "queue's retention ({})",
                            view.name, format_time(visible_at), format_duration(config.retention)));
  return visible_at;
}

// Duplicates of earlier sends, or of earlier messages of this batch, store
// nothing: per message, the seq it repeats (0: an earlier one of this batch),
// or nullopt for a message to store.
std::vector<std::optional<std::uint64_t>> duplicates_of(
    QueueView& view, const std::vector<OutgoingMessage>& messages) {
  std::vector<std::optional<std::uint64_t>> duplicate_of(messages.size());
  std::unordered_set<std::string_view> in_batch;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& dedup_id = messages[i].dedup_id;
    if (dedup_id.empty()) continue;
    duplicate_of[i] = view.find_dedup(dedup_id);
    if (!duplicate_of[i] && !in_batch.insert(dedup_id).second) duplicate_of[i] = 0;
  }
  return duplicate_of;
}

}  // namespace

bool LmdbBroker::do_create_queue(const std::string& queue, const ConfigChange& change) {
  QueueConfig wanted = apply(QueueConfig{}, change);
  Txn txn(*env_, Txn::Write);
  if (auto existing = load(txn, queue)) {
    check_agrees(queue, existing->config, change);
    return false;
  }
  QueueRecord rec = new_queue(txn, queue);
  rec.config = wanted;
  txn.put(db().queues, queue, store::encode(rec));
  txn.commit();
  return true;
}

QueueConfig LmdbBroker::do_configure(const std::string& queue, const ConfigChange& change) {
  if (change.empty()) {
    Txn txn(*env_, Txn::Read);
    return must_load(txn, queue).config;
  }
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  check_kind_kept(queue, view.rec.config, change);
  QueueConfig config = apply(view.rec.config, change);
  validate(config);
  // The shared budget was earned at the old rate: what it is worth at the
  // new one is shared_rate's rule (rate_limiter.hpp), as on every backend.
  view.rec.rate_tat_us = static_cast<std::int64_t>(
      shared_rate(config.rate, {view.rec.config.rate, static_cast<double>(view.rec.rate_tat_us)})
          .tat_us());
  view.rec.config = config;
  view.save();
  txn.commit();
  return config;
}

RemovedCounts LmdbBroker::do_delete_queue(const std::string& queue) {
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

std::vector<std::string> LmdbBroker::do_list_queues() {
  Txn txn(*env_, Txn::Read);
  std::vector<std::string> names;
  Cursor c(txn, db().queues);
  for (bool ok = c.first(); ok; ok = c.next()) names.emplace_back(c.key());
  return names;
}

std::vector<SendResult> LmdbBroker::do_send(const std::string& queue,
                                            std::vector<OutgoingMessage> messages,
                                            const SendOptions& options) {
  if (messages.size() >= kBulkSend) commit_small_change(queue);
  Txn txn(*env_, Txn::Write);
  const bool bulk = messages.size() >= kBulkSend;
  auto results = send_in(txn, queue, std::move(messages), options);
  txn.commit();
  if (bulk) env_->drop_mapped_pages();
  return results;
}

std::vector<SendResult> LmdbBroker::send_in(Txn& txn, const std::string& queue,
                                            std::vector<OutgoingMessage> messages,
                                            const SendOptions& options) {
  auto view = open(txn, queue, options.create_queue);
  view.maintain();
  const auto& config = view.rec.config;
  check_send_against(queue, config, messages, options);
  if (config.content_dedup)
    for (auto& m : messages)
      if (m.dedup_id.empty()) m.dedup_id = sha256_hex(m.body);

  const Millis visible_at = send_visible_at(view, options);
  const auto duplicate_of = duplicates_of(view, messages);
  const auto fresh = static_cast<std::uint64_t>(
      std::count(duplicate_of.begin(), duplicate_of.end(), std::nullopt));
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
    view.add_live(seq, header);
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

void LmdbBroker::commit_small_change(const std::string& queue) {
  Txn txn(*env_, Txn::Write);
  auto rec = load(txn, queue);
  if (!rec) return;
  QueueView view(txn, db(), queue, std::move(*rec), clock_->now());
  view.holder_alive = &holder_alive_;
  view.maintain();
  view.save();
  txn.commit();
}

std::optional<QueueRecord> LmdbBroker::load(Txn& txn, const std::string& queue) {
  check_queue_name(queue);
  auto bytes = txn.get(db().queues, queue);
  if (!bytes) return std::nullopt;
  auto rec = store::decode_queue(*bytes);
  if (!rec) damaged_queue(queue);
  return rec;
}

QueueRecord LmdbBroker::must_load(Txn& txn, const std::string& queue) {
  auto rec = load(txn, queue);
  if (!rec) no_such_queue(queue);
  return std::move(*rec);
}

QueueView LmdbBroker::open(Txn& txn, const std::string& queue, bool create) {
  auto rec = load(txn, queue);
  if (!rec && !create) no_such_queue(queue);
  QueueView view(txn, db(), queue, rec ? std::move(*rec) : new_queue(txn, queue), clock_->now());
  view.holder_alive = &holder_alive_;
  return view;
}

QueueRecord LmdbBroker::new_queue(Txn& txn, const std::string& queue) {
  check_new_queue_name(queue);
  QueueRecord rec;
  rec.qid = next_qid(txn);
  rec.created_at = clock_->now();
  return rec;
}

void LmdbBroker::damaged_queue(const std::string& queue) const {
  throw Error(ErrorKind::Io, fmt::format("{}: queue {}: its record is damaged (checksum mismatch)",
                                         env_->path(), queue));
}

std::uint32_t LmdbBroker::next_qid(Txn& txn) {
  auto qid = static_cast<std::uint32_t>(meta_u64(txn, store::kNextQidKey));
  set_meta_u64(txn, store::kNextQidKey, qid + 1);
  return qid;
}

std::uint64_t LmdbBroker::meta_u64(Txn& txn, const char* key) {
  auto bytes = txn.get(db().meta, key);
  if (!bytes) return 1;
  auto v = store::decode_meta_number(*bytes, txn.format());
  if (!v) damaged_meta(fmt::format("meta {}", key));
  return *v;
}

void LmdbBroker::set_meta_u64(Txn& txn, const char* key, std::uint64_t v) {
  txn.put(db().meta, key, store::encode_meta_number(v));
}

void LmdbBroker::damaged_meta(const std::string& what) const {
  throw Error(ErrorKind::Io, fmt::format("{}: {}: damaged (checksum mismatch); run 'q verify' "
                                         "or restore a backup",
                                         env_->path(), what));
}

std::vector<std::string> LmdbBroker::keys_with_prefix(Txn& txn, MDB_dbi dbi,
                                                      const std::string& prefix) {
  std::vector<std::string> keys;
  Cursor c(txn, dbi);
  for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next())
    keys.emplace_back(c.key());
  return keys;
}

void LmdbBroker::do_pause(const std::string& queue, Millis until, const std::string& reason) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  if (until != 0 && until <= view.now)
    throw Error(ErrorKind::Usage, "--for: the pause must end in the future");
  Pause p{view.now, until, reason};
  txn.put(db().pauses, view.prefix, store::encode(p));
  txn.commit();
}

std::optional<Pause> LmdbBroker::do_resume(const std::string& queue) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  auto was = active_pause(txn, db(), view.rec.qid, queue, view.now);
  if (!txn.del(db().pauses, view.prefix)) return std::nullopt;
  txn.commit();
  return was;
}

void LmdbBroker::do_register_worker(std::uint32_t pid, Millis since, const std::string& command) {
  Txn txn(*env_, Txn::Write);
  q::register_worker(txn, db(), pid, since, command);
  txn.commit();
}

void LmdbBroker::do_unregister_worker(std::uint32_t pid, Millis since) {
  Txn txn(*env_, Txn::Write);
  q::unregister_worker(txn, db(), pid, since);
  txn.commit();
}

std::vector<std::string> LmdbBroker::do_verify() {
  Txn txn(*env_, Txn::Read);
  auto problems = store::verify_file(txn, db(), clock_->now());
  for (auto& problem : verify_holders(txn, db())) problems.push_back(std::move(problem));
  return problems;
}

std::unique_ptr<Broker> open_lmdb_broker(const LmdbOptions& options) {
  auto env = store::Env::open(options.open);
  // By default a holder lives while its process runs or its commands do
  // (descendants.hpp).
  HolderProbe alive = options.holder_alive;
  if (!alive)
    alive = [path = env->path()](const Holder& h) {
      return holder_alive(h) || descendants_alive(path, h);
    };
  return std::make_unique<LmdbBroker>(std::move(env), options.clock, options.random,
                                      std::move(alive));
}

}  // namespace q
