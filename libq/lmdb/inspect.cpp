// The LMDB backend: looking without changing anything (peek, stats, show).
#include "libq/lmdb/broker_impl.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "libq/lmdb/history.hpp"
#include "libq/lmdb/pause.hpp"

namespace q {

std::vector<Message> LmdbBroker::do_peek(const std::string& queue, std::size_t max) {
  Txn txn(*env_, Txn::Read);
  QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
  auto found = view.headers(db().messages, "the record of message", max);
  std::vector<Message> out;
  for (auto& [seq, header] : found)
    out.push_back(to_message(seq, header, view.body(seq), state_of(header, view.now)));
  return out;
}

std::vector<QueueStats> LmdbBroker::do_stats(const std::string& queue) {
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

std::optional<QueueConfig> LmdbBroker::do_queue_config(const std::string& queue) {
  Txn txn(*env_, Txn::Read);
  auto rec = load(txn, queue);
  if (!rec) return std::nullopt;
  return rec->config;
}

QueueStats LmdbBroker::queue_stats(Txn& txn, const std::string& name, const QueueRecord& rec,
                                   Millis now) {
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
      auto header = txn.get(db().messages, store::key_q_seq(rec.qid, store::key_time_seq(c.key())));
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

std::optional<Message> LmdbBroker::do_show(const std::string& queue, const std::string& id) {
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

}  // namespace q
