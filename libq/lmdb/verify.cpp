#include "libq/lmdb/verify.hpp"

#include <algorithm>
#include <map>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "libq/lmdb/records.hpp"

namespace q::store {
namespace {

constexpr std::size_t kMaxProblems = 1000;

class Verifier {
 public:
  Verifier(Txn& txn, const Databases& db) : txn_(txn), db_(db) {}

  std::vector<std::string> run() {
    load_queues();
    for (auto& [qid, q] : queues_) check_queue(qid, q);
    check_unknown_queue_entries();
    check_bodies();
    check_next_seq();
    check_next_qid();
    check_kept_keys(db_.dedup, "dedup");
    check_kept_keys(db_.done, "done");
    if (problems_.size() >= kMaxProblems) problems_.push_back("... (stopped after 1000 problems)");
    return problems_;
  }

 private:
  struct Queue {
    std::string name;
    QueueRecord rec;
  };

  void problem(std::string text) {
    if (problems_.size() < kMaxProblems) problems_.push_back(std::move(text));
  }

  std::set<std::string> keys_of(MDB_dbi dbi, const std::string& prefix) {
    std::set<std::string> keys;
    Cursor c(txn_, dbi);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) keys.emplace(c.key());
    return keys;
  }

  void load_queues() {
    Cursor c(txn_, db_.queues);
    for (bool ok = c.first(); ok; ok = c.next()) {
      auto rec = decode_queue(c.value());
      if (!rec) {
        problem(fmt::format("queue {}: its record is damaged (checksum mismatch)", c.key()));
        continue;
      }
      if (queues_.count(rec->qid))
        problem(fmt::format("queues {} and {} share the id {}", queues_[rec->qid].name, c.key(),
                            rec->qid));
      queues_[rec->qid] = Queue{std::string(c.key()), *rec};
    }
  }

  void check_queue(std::uint32_t qid, const Queue& q) {
    const std::string prefix = key_q(qid);
    const std::string& name = q.name;
    auto ready = keys_of(db_.ready, prefix);
    auto delayed = keys_of(db_.delayed, prefix);
    auto leases = keys_of(db_.leases, prefix);
    auto age = keys_of(db_.age, prefix);
    auto dead_expiry = keys_of(db_.dead_expiry, prefix);
    const std::size_t ready_count = ready.size(), delayed_count = delayed.size(),
                      leases_count = leases.size();
    std::set<std::string> group_messages = keys_of(db_.group_messages, prefix);
    std::map<std::string, GroupRecord> actual_groups;  // by group: messages, in flight

    // Every message: its checksum, its body, and exactly one schedule entry.
    {
      Cursor c(txn_, db_.messages);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
        auto seq = key_q_seq_seq(c.key());
        auto id = message_id(seq);
        referenced_.push_back(seq);
        auto header = decode_header(c.value());
        if (!header) {
          problem(
              fmt::format("queue {}: message {}: record damaged (checksum mismatch)", name, id));
          continue;
        }
        check_body(name, id, seq);
        auto key = key_q_time_seq(qid, header->visible_at, seq);
        int homes = ready.erase(key) + delayed.erase(key) + leases.erase(key);
        if (homes != 1)
          problem(fmt::format("queue {}: message {}: in {} schedule indexes (should be 1)", name,
                              id, homes));
        if (!age.erase(key_q_time_seq(qid, header->available_at, seq)))
          problem(fmt::format("queue {}: message {}: missing from the age index", name, id));
        if (q.rec.config.fifo) {
          std::string member = key_group_prefix(qid, header->group) + key_seq(seq);
          if (!group_messages.erase(member))
            problem(fmt::format("queue {}: message {}: missing from group {}", name, id,
                                header->group));
          auto& g = actual_groups[header->group];
          ++g.messages;
        }
      }
    }
    for (const auto* left : {&ready, &delayed, &leases})
      for (const auto& key : *left)
        problem(fmt::format("queue {}: schedule entry for {} has no message", name,
                            message_id(key_time_seq(key))));
    for (const auto& key : age)
      problem(fmt::format("queue {}: age entry for {} has no message", name,
                          message_id(key_time_seq(key))));
    for (const auto& key : group_messages)
      problem(fmt::format("queue {}: group entry {} has no message", name,
                          message_id(key_q_seq_seq(key.substr(key.size() - 12)))));

    // Counters against what is there.
    auto compare = [&](const char* what, std::uint64_t recorded, std::uint64_t actual) {
      if (recorded != actual)
        problem(fmt::format("queue {}: {} counter is {}, actual {}", name, what, recorded, actual));
    };
    compare("ready", q.rec.ready, ready_count);
    compare("delayed", q.rec.delayed, delayed_count);
    compare("in-flight", q.rec.leased, leases_count);

    // Dead letters.
    std::uint64_t dead = 0;
    {
      Cursor c(txn_, db_.dead);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
        ++dead;
        auto seq = key_q_seq_seq(c.key());
        auto id = message_id(seq);
        referenced_.push_back(seq);
        auto header = decode_header(c.value());
        if (!header) {
          problem(fmt::format("queue {}: dead letter {}: record damaged (checksum mismatch)", name,
                              id));
          continue;
        }
        check_body(name, id, seq);
        if (!dead_expiry.erase(key_q_time_seq(qid, header->dead_at, seq)))
          problem(fmt::format("queue {}: dead letter {}: missing from the expiry index", name, id));
      }
    }
    for (const auto& key : dead_expiry)
      problem(fmt::format("queue {}: dead-letter expiry entry for {} has no dead letter", name,
                          message_id(key_time_seq(key))));
    compare("dead", q.rec.dead, dead);

    if (q.rec.config.fifo) check_groups(qid, q, actual_groups);
  }

  void check_groups(std::uint32_t qid, const Queue& q, std::map<std::string, GroupRecord>& actual) {
    const std::string prefix = key_q(qid);
    // In-flight messages per group, from the leases index.
    {
      Cursor c(txn_, db_.leases);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
        auto bytes = txn_.get(db_.messages, key_q_seq(qid, key_time_seq(c.key())));
        if (!bytes) continue;
        if (auto header = decode_header(*bytes)) ++actual[header->group].in_flight;
      }
    }
    std::uint64_t groups = 0, held = 0;
    auto heads = keys_of(db_.heads, prefix);
    Cursor c(txn_, db_.groups);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
      std::string group(c.key().substr(4));
      auto record = decode_group(c.value(), txn_.format());
      if (!record) {
        problem(fmt::format("queue {}: group {}: record damaged", q.name, group));
        continue;
      }
      auto& a = actual[group];
      if (record->messages != a.messages)
        problem(fmt::format("queue {}: group {}: counts {} messages, has {}", q.name, group,
                            record->messages, a.messages));
      a.messages = UINT64_MAX;  // seen
      ++groups;
      if (record->in_flight > 0) ++held;
      if (record->in_flight == 0 && record->messages > 0) {
        auto group_prefix = key_group_prefix(qid, group);
        Cursor first(txn_, db_.group_messages);
        if (first.seek(group_prefix) && first.has_prefix(group_prefix)) {
          auto seq = key_q_seq_seq(first.key().substr(group_prefix.size() - 4));
          auto bytes = txn_.get(db_.messages, key_q_seq(qid, seq));
          auto header = bytes ? decode_header(*bytes) : std::nullopt;
          auto head_key = header ? key_q_time_seq(qid, header->visible_at, seq) : "";
          if (header && !heads.erase(head_key))
            problem(fmt::format("queue {}: group {}: its head {} is not offered", q.name, group,
                                message_id(seq)));
          else if (auto offered = header ? txn_.get(db_.heads, head_key) : std::nullopt;
                   offered && decode_head(*offered, txn_.format()) != group)
            problem(fmt::format("queue {}: group {}: the heads entry of {} is damaged", q.name,
                                group, message_id(seq)));
        }
      }
    }
    for (const auto& [group, a] : actual)
      if (a.messages != UINT64_MAX && a.messages > 0)
        problem(fmt::format("queue {}: group {} has messages but no record", q.name, group));
    for (const auto& key : heads)
      problem(fmt::format("queue {}: offered head {} is not the head of a free group", q.name,
                          message_id(key_time_seq(key))));
    if (q.rec.groups != groups)
      problem(
          fmt::format("queue {}: groups counter is {}, actual {}", q.name, q.rec.groups, groups));
    if (q.rec.held_groups != held)
      problem(fmt::format("queue {}: held-groups counter is {}, actual {}", q.name,
                          q.rec.held_groups, held));
  }

  void check_body(const std::string& queue, const std::string& id, std::uint64_t seq) {
    auto bytes = txn_.get(db_.bodies, key_seq(seq));
    if (!bytes)
      problem(fmt::format("queue {}: message {}: body missing", queue, id));
    else if (!decode_body(*bytes))
      problem(fmt::format("queue {}: message {}: body damaged (checksum mismatch)", queue, id));
  }

  // Index entries whose queue id belongs to no queue.
  void check_unknown_queue_entries() {
    const std::pair<MDB_dbi, const char*> indexes[] = {{db_.messages, "messages"},
                                                       {db_.ready, "ready"},
                                                       {db_.delayed, "delayed"},
                                                       {db_.leases, "leases"},
                                                       {db_.age, "age"},
                                                       {db_.dead, "dead"},
                                                       {db_.dead_expiry, "dead-expiry"},
                                                       {db_.groups, "groups"},
                                                       {db_.heads, "heads"},
                                                       {db_.group_messages, "group-messages"}};
    for (const auto& [dbi, name] : indexes) {
      Cursor c(txn_, dbi);
      for (bool ok = c.first(); ok;) {
        std::uint32_t qid = key_qid(c.key());
        if (queues_.count(qid)) {
          ok = c.seek(key_q(qid + 1));
          continue;
        }
        problem(fmt::format("{}: entries of a queue that does not exist (id {})", name, qid));
        ok = c.seek(key_q(qid + 1));
      }
    }
  }

  // Every body belongs to exactly one message or dead letter.
  void check_bodies() {
    std::sort(referenced_.begin(), referenced_.end());
    for (std::size_t i = 1; i < referenced_.size(); ++i)
      if (referenced_[i] == referenced_[i - 1])
        problem(fmt::format("message {} is stored twice", message_id(referenced_[i])));
    Cursor c(txn_, db_.bodies);
    for (bool ok = c.first(); ok; ok = c.next()) {
      std::uint64_t seq = 0;
      for (unsigned char ch : c.key()) seq = (seq << 8) | ch;
      if (!std::binary_search(referenced_.begin(), referenced_.end(), seq))
        problem(fmt::format("body of {} belongs to no message", message_id(seq)));
    }
  }

  // Sends number messages from next-seq on: it must be above every id in
  // the file (else the next send collides, or the sequence wraps).
  void check_next_seq() {
    auto bytes = txn_.get(db_.meta, kNextSeqKey);
    auto decoded = bytes ? decode_meta_number(*bytes, txn_.format()) : std::nullopt;
    if (!decoded) {
      problem("meta: next-seq is missing or damaged");
      return;
    }
    std::uint64_t next = *decoded;
    Cursor c(txn_, db_.bodies);
    if (!c.last()) return;
    std::uint64_t largest = 0;
    for (unsigned char ch : c.key()) largest = (largest << 8) | ch;
    if (next <= largest || next == UINT64_MAX)
      problem(fmt::format("meta: next-seq {} is not above the largest message id {}{}", next,
                          message_id(largest),
                          next == UINT64_MAX ? " (the sequence is exhausted)" : ""));
  }

  // Queues are numbered from next-qid on: it must be above every queue's id.
  void check_next_qid() {
    auto bytes = txn_.get(db_.meta, kNextQidKey);
    auto next = bytes ? decode_meta_number(*bytes, txn_.format()) : std::nullopt;
    if (!next) {
      problem("meta: next-qid is missing or damaged");
      return;
    }
    if (!queues_.empty() && *next <= queues_.rbegin()->first)
      problem(fmt::format("meta: next-qid {} is not above the largest queue id {}", *next,
                          queues_.rbegin()->first));
  }

  // Dedup ids and idempotency keys: each record intact (its checksum, in
  // format 2), of a queue that exists.
  void check_kept_keys(MDB_dbi dbi, const char* name) {
    Cursor c(txn_, dbi);
    for (bool ok = c.first(); ok;) {
      std::uint32_t qid = key_qid(c.key());
      auto q = queues_.find(qid);
      if (q == queues_.end()) {
        problem(fmt::format("{}: entries of a queue that does not exist (id {})", name, qid));
        if (qid == UINT32_MAX) break;
        ok = c.seek(key_q(qid + 1));
        continue;
      }
      bool intact = dbi == db_.dedup ? decode_dedup(c.value(), txn_.format()).has_value()
                                     : decode_done(c.value(), txn_.format()).has_value();
      if (!intact)
        problem(fmt::format("queue {}: {} entry '{}': damaged (checksum mismatch)", q->second.name,
                            name, c.key().substr(4)));
      ok = c.next();
    }
  }

  Txn& txn_;
  const Databases& db_;
  std::map<std::uint32_t, Queue> queues_;
  std::vector<std::uint64_t> referenced_;
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> verify_file(Txn& txn, const Databases& db, Millis) {
  return Verifier(txn, db).run();
}

}  // namespace q::store
