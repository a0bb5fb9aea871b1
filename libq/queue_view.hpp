// Internal to libq: one queue's records inside one LMDB transaction (its
// schedule indexes, FIFO group bookkeeping, removal, maintenance, the shared
// rate budget, dedup and receipts), shared by the broker and export/import.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "broker.hpp"
#include "holder.hpp"
#include "lmdb_store.hpp"
#include "records.hpp"
#include "rules.hpp"

namespace q {

using store::Cursor;
using store::Header;
using store::QueueRecord;
using store::Txn;

// Lazy clean-up of expired messages, dead letters and dedup entries rides on
// transactions that run anyway; the bound keeps any one of them short.
constexpr std::size_t kExpireBatch = 1000;

// How often the holders of a queue's leases are checked for life (issue 14):
// often enough that a dead holder's message moves on within a fraction of a
// second, seldom enough that one-shot processes do not each rescan.
constexpr Millis kHolderCheckEvery = 250;

class QueueView;
// Holders of leases (lmdb_holders.cpp).
std::uint64_t release_dead_holders(QueueView& view);
void drop_holder(QueueView& view, std::uint64_t seq);

// One queue inside one transaction: its record, loaded once and saved at the end.
class QueueView {
 public:
  QueueView(Txn& txn, const store::Databases& db, std::string name, QueueRecord record, Millis now)
      : txn(txn),
        db(db),
        name(std::move(name)),
        rec(std::move(record)),
        now(now),
        prefix(store::key_q(rec.qid)) {}

  Txn& txn;
  const store::Databases& db;
  std::string name;
  QueueRecord rec;
  Millis now;
  std::string prefix;
  // Set by the broker: tells whether a holder of leases lives; without it,
  // maintain() releases nothing for a dead holder.
  const HolderProbe* holder_alive = nullptr;

  void save() { txn.put(db.queues, name, store::encode(rec)); }

  std::uint64_t depth() const { return rec.ready + rec.delayed + rec.leased; }

  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(ErrorKind::Io, fmt::format("{}: queue {}: {} (run 'q verify' or restore a backup)",
                                           txn.env().path(), name, what));
  }

  std::optional<Header> find_header(MDB_dbi dbi, std::uint64_t seq) {
    auto bytes = txn.get(dbi, store::key_q_seq(rec.qid, seq));
    if (!bytes) return std::nullopt;
    auto header = store::decode_header(*bytes);
    if (!header)
      corrupt(fmt::format("the record of message {} is damaged (checksum mismatch)",
                          store::message_id(seq)));
    return header;
  }

  // A body copied out in a read transaction: its pages need not stay resident.
  void release_body(std::uint64_t seq) {
    if (auto bytes = txn.get(db.bodies, store::key_seq(seq))) txn.release_read(*bytes);
  }

  store::Body body(std::uint64_t seq) {
    auto bytes = txn.get(db.bodies, store::key_seq(seq));
    if (!bytes) corrupt(fmt::format("the body of message {} is missing", store::message_id(seq)));
    auto body = store::decode_body(*bytes);
    if (!body)
      corrupt(fmt::format("the body of message {} is damaged (checksum mismatch)",
                          store::message_id(seq)));
    return std::move(*body);
  }

  void put_header(MDB_dbi dbi, std::uint64_t seq, const Header& header) {
    txn.put(dbi, store::key_q_seq(rec.qid, seq), store::encode(header));
  }

  // Calls `each(seq, header)` for this queue's records in `dbi` (messages or
  // dead), in id order, until it returns false. `what` names a record in the
  // error for a damaged one. The cursor stays open: `each` must not write.
  template <class Each>
  void each_header(MDB_dbi dbi, const char* what, Each&& each) {
    Cursor c(txn, dbi);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
      auto seq = store::key_q_seq_seq(c.key());
      auto header = store::decode_header(c.value());
      if (!header)
        corrupt(fmt::format("{} {} is damaged (checksum mismatch)", what, store::message_id(seq)));
      if (!each(seq, std::move(*header))) return;
    }
  }

  // The first `max` of this queue's records in `dbi`, decoded.
  std::vector<std::pair<std::uint64_t, Header>> headers(MDB_dbi dbi, const char* what,
                                                        std::size_t max = SIZE_MAX) {
    std::vector<std::pair<std::uint64_t, Header>> found;
    if (max == 0) return found;
    each_header(dbi, what, [&](std::uint64_t seq, Header header) {
      found.emplace_back(seq, std::move(header));
      return found.size() < max;
    });
    return found;
  }

  // ---- the schedule: ready, delayed and leases indexes ----------------------

  // Files the message under its visible_at according to its flags.
  void link(std::uint64_t seq, Header& header) {
    if ((header.flags & Header::kDelayed) && header.visible_at <= now)
      header.flags &= static_cast<std::uint8_t>(~Header::kDelayed);
    auto key = store::key_q_time_seq(rec.qid, header.visible_at, seq);
    if (header.flags & Header::kLeased) {
      txn.put(db.leases, key, {});
      ++rec.leased;
    } else if (header.flags & Header::kDelayed) {
      txn.put(db.delayed, key, {});
      ++rec.delayed;
    } else {
      txn.put(db.ready, key, {});
      ++rec.ready;
    }
  }

  // Due lease and delay entries may already have moved to `ready`. Returns
  // true when the message was in flight (its lease had not run out).
  bool unlink(std::uint64_t seq, const Header& header) {
    auto key = store::key_q_time_seq(rec.qid, header.visible_at, seq);
    if ((header.flags & Header::kLeased) && txn.del(db.leases, key)) {
      --rec.leased;
      return true;
    }
    if ((header.flags & Header::kDelayed) && txn.del(db.delayed, key)) {
      --rec.delayed;
      return false;
    }
    if (txn.del(db.ready, key)) {
      --rec.ready;
      return false;
    }
    corrupt(fmt::format("message {} is missing from the schedule index", store::message_id(seq)));
  }

  // Moves due entries of `from` to `ready`; returns how many.
  std::uint64_t promote(MDB_dbi from) {
    auto due = due_keys(from);
    for (const auto& key : due) {
      // A FIFO message whose lease ran out no longer holds its group.
      std::optional<GroupEdit> group;
      if (from == db.leases && rec.config.fifo) {
        auto header = find_header(db.messages, store::key_time_seq(key));
        if (header) group.emplace(*this, header->group);
      }
      txn.del(from, key);
      txn.put(db.ready, key, {});
      if (group) {
        group->left_flight();
        group->done();
      }
    }
    return due.size();
  }

  // ---- FIFO message groups ----------------------------------------------------
  // Every change to a group goes through a GroupEdit: it takes the group's head
  // out of `heads` first (while no delivery of the group is in flight, its head
  // is there, keyed by its visible time) and offers the head, maybe a new one,
  // again when done. On a standard queue it does nothing.

  class GroupEdit {
   public:
    GroupEdit(QueueView& view, std::string group) : v_(view), group_(std::move(group)) {
      active_ = v_.rec.config.fifo;
      if (!active_) return;
      auto bytes = v_.txn.get(v_.db.groups, store::key_q_bytes(v_.rec.qid, group_));
      if (bytes) {
        auto decoded = store::decode_group(*bytes, v_.txn.format());
        if (!decoded) v_.corrupt(fmt::format("the record of group {} is damaged", group_));
        g_ = *decoded;
      }
      was_ = g_;
      if (g_.messages > 0 && g_.in_flight == 0) v_.head_entry(group_, false);
    }
    void added(std::uint64_t seq) {
      if (!active_) return;
      v_.txn.put(v_.db.group_messages, group_key(seq), {});
      ++g_.messages;
    }
    void removed(std::uint64_t seq) {
      if (!active_) return;
      v_.txn.del(v_.db.group_messages, group_key(seq));
      --g_.messages;
    }
    void took_flight() { ++g_.in_flight; }
    void left_flight() {
      if (g_.in_flight > 0) --g_.in_flight;
    }
    void done() {
      if (!active_) return;
      auto key = store::key_q_bytes(v_.rec.qid, group_);
      if (g_.messages == 0) {
        v_.txn.del(v_.db.groups, key);
      } else {
        v_.txn.put(v_.db.groups, key, store::encode(g_));
        if (g_.in_flight == 0) v_.head_entry(group_, true);
      }
      v_.rec.groups += (g_.messages > 0) - (was_.messages > 0);
      v_.rec.held_groups += (g_.in_flight > 0) - (was_.in_flight > 0);
      active_ = false;
    }

   private:
    std::string group_key(std::uint64_t seq) const {
      std::string k = store::key_group_prefix(v_.rec.qid, group_);
      k += store::key_seq(seq);
      return k;
    }
    QueueView& v_;
    std::string group_;
    store::GroupRecord g_, was_;
    bool active_ = false;
  };

  // Puts the group's head into `heads` (offer) or takes it out.
  void head_entry(const std::string& group, bool offer) {
    auto group_prefix = store::key_group_prefix(rec.qid, group);
    std::uint64_t seq;
    {
      Cursor c(txn, db.group_messages);
      if (!c.seek(group_prefix) || !c.has_prefix(group_prefix))
        corrupt(fmt::format("group {} has no messages in its index", group));
      seq = store::key_q_seq_seq(c.key().substr(group_prefix.size() - 4));
    }
    auto header = find_header(db.messages, seq);
    if (!header) corrupt(fmt::format("group {} lists a missing message", group));
    auto key = store::key_q_time_seq(rec.qid, header->visible_at, seq);
    if (offer)
      txn.put(db.heads, key, store::encode_head(group));
    else
      txn.del(db.heads, key);
  }

  // ---- removal --------------------------------------------------------------

  // `open` is the caller's edit of the message's group, when it has one.
  void remove_live(std::uint64_t seq, const Header& header, GroupEdit* open = nullptr) {
    std::optional<GroupEdit> own;
    GroupEdit& group = open ? *open : own.emplace(*this, header.group);
    if (unlink(seq, header)) group.left_flight();
    group.removed(seq);
    drop_holder(*this, seq);
    txn.del(db.messages, store::key_q_seq(rec.qid, seq));
    txn.del(db.age, store::key_q_time_seq(rec.qid, header.available_at, seq));
    txn.del(db.bodies, store::key_seq(seq));
    if (header.has_history) txn.del(db.attempts, store::key_seq(seq));
    if (own) own->done();
  }

  // Takes a dead letter out of the dead-letter queue; its body stays.
  void unfile_dead(std::uint64_t seq, const Header& header) {
    txn.del(db.dead, store::key_q_seq(rec.qid, seq));
    txn.del(db.dead_expiry, store::key_q_time_seq(rec.qid, header.dead_at, seq));
    --rec.dead;
  }

  void remove_dead(std::uint64_t seq, const Header& header) {
    unfile_dead(seq, header);
    txn.del(db.bodies, store::key_seq(seq));
    if (header.has_history) txn.del(db.attempts, store::key_seq(seq));
  }

  void dead_letter(std::uint64_t seq, Header header, std::string reason,
                   GroupEdit* open = nullptr) {
    std::optional<GroupEdit> own;
    GroupEdit& group = open ? *open : own.emplace(*this, header.group);
    if (unlink(seq, header)) group.left_flight();
    group.removed(seq);
    if (own) own->done();
    drop_holder(*this, seq);
    txn.del(db.messages, store::key_q_seq(rec.qid, seq));
    txn.del(db.age, store::key_q_time_seq(rec.qid, header.available_at, seq));
    header.flags = 0;
    header.nonce = 0;
    header.dead_at = now;
    header.reason = std::move(reason);
    put_header(db.dead, seq, header);
    txn.put(db.dead_expiry, store::key_q_time_seq(rec.qid, now, seq), {});
    ++rec.dead;
    ++rec.counters.dead_lettered;
  }

  // A dead letter (taken out of its dead-letter queue) lives again in this queue.
  void revive(std::uint64_t seq, const Header& dead) {
    Header live;
    live.sent_at = dead.sent_at;
    live.visible_at = now;
    live.available_at = now;
    live.group = rec.config.fifo ? dead.group : std::string();
    live.has_history = dead.has_history;  // the attempt history follows the message
    // A FIFO message goes back into its group at its place in send order.
    GroupEdit group(*this, live.group);
    put_header(db.messages, seq, live);
    link(seq, live);
    group.added(seq);
    group.done();
    txn.put(db.age, store::key_q_time_seq(rec.qid, now, seq), {});
  }

  // ---- maintenance run by every write transaction on the queue ----------------

  void maintain() {
    auto leases_due = promote(db.leases);
    rec.leased -= leases_due;
    rec.ready += leases_due;
    auto delays_due = promote(db.delayed);
    rec.delayed -= delays_due;
    rec.ready += delays_due;
    if (auto budget = rate_budget())  // a future stored by a clock ahead is pulled back, once
      rec.rate_tat_us =
          static_cast<std::int64_t>(rate_tat(*budget, static_cast<double>(now) * 1000));
    expire_messages();
    expire_dead_letters();
    expire_keys(db.dedup_expiry, db.dedup);
    expire_keys(db.done_expiry, db.done);
    if (holder_alive) release_dead_holders(*this);
  }

  // ---- the shared rate budget (GCRA) --------------------------------------------
  // One start every 1/rate seconds, with a burst of a tenth of a second's
  // worth so fast queues need not take one message per transaction.

  struct RateBudget {
    double interval_us;
    double tolerance_us;
  };
  std::optional<RateBudget> rate_budget() const {
    if (rec.config.rate <= 0) return std::nullopt;
    double interval = 1e6 / rec.config.rate;
    return RateBudget{interval, interval * std::floor(rec.config.rate / 10)};
  }

  // The stored theoretical arrival time, never further ahead of now than one
  // full burst and one interval: a consumer whose clock ran ahead (or a clock
  // stepped back) must not make every other consumer wait for its future.
  double rate_tat(const RateBudget& budget, double now_us) const {
    double tat = std::max(static_cast<double>(rec.rate_tat_us), now_us);
    return std::min(tat, now_us + budget.tolerance_us + budget.interval_us);
  }

  // How many starts the budget allows now.
  std::uint64_t rate_allows() const {
    auto budget = rate_budget();
    if (!budget) return UINT64_MAX;
    double now_us = static_cast<double>(now) * 1000;
    double tat = rate_tat(*budget, now_us);
    if (tat > now_us + budget->tolerance_us) return 0;
    return static_cast<std::uint64_t>((now_us + budget->tolerance_us - tat) / budget->interval_us) +
           1;
  }

  void rate_take(std::uint64_t starts) {
    auto budget = rate_budget();
    if (!budget || starts == 0) return;
    double now_us = static_cast<double>(now) * 1000;
    double tat = rate_tat(*budget, now_us);
    rec.rate_tat_us =
        static_cast<std::int64_t>(tat + budget->interval_us * static_cast<double>(starts));
  }

  // The first time the budget allows a start.
  Millis rate_ready_at() const {
    auto budget = rate_budget();
    if (!budget) return INT64_MIN;
    const double now_us = static_cast<double>(now) * 1000;
    // A stored future no consumer on this clock could have made: ready now,
    // so that the next write transaction pulls it back (see maintain()).
    if (static_cast<double>(rec.rate_tat_us) > now_us + budget->tolerance_us + budget->interval_us)
      return now;
    double at_us = rate_tat(*budget, now_us) - budget->tolerance_us;
    return static_cast<Millis>(std::ceil(at_us / 1000));
  }

  // Retention counts from the time a message first became available (its
  // send, the end of its delay, its redrive or import): the `age` index holds
  // exactly that time, so expired messages are a prefix of it, whatever the
  // order of their ids.
  void expire_messages() {
    std::vector<std::uint64_t> old;
    {
      Cursor c(txn, db.age);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && old.size() < kExpireBatch;
           ok = c.next()) {
        if (store::key_time(c.key()) + rec.config.retention > now) break;
        old.push_back(store::key_time_seq(c.key()));
      }
    }
    for (auto seq : old) {
      auto header = find_header(db.messages, seq);
      if (!header)
        corrupt(fmt::format("message {} is in the age index but missing", store::message_id(seq)));
      remove_live(seq, *header);
    }
    rec.counters.expired += old.size();
  }

  void expire_dead_letters() {
    std::vector<std::uint64_t> old;
    {
      Cursor c(txn, db.dead_expiry);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && old.size() < kExpireBatch;
           ok = c.next()) {
        if (store::key_time(c.key()) + kDeadLetterRetention > now) break;
        old.push_back(store::key_time_seq(c.key()));
      }
    }
    for (auto seq : old)
      if (auto header = find_header(db.dead, seq)) remove_dead(seq, *header);
    rec.counters.expired += old.size();
  }

  // Dedup ids and idempotency (done) keys past their time: their expiry
  // index is (qid, expires, key); the record holds its expiry, which a later
  // renewal may have moved.
  void expire_keys(MDB_dbi expiry_index, MDB_dbi records) {
    for (const auto& key : due_keys(expiry_index, kExpireBatch)) {
      txn.del(expiry_index, key);
      auto record_key = store::key_q_bytes(rec.qid, store::key_time_bytes(key));
      auto entry = txn.get(records, record_key);
      if (!entry) continue;
      std::optional<Millis> expires;
      if (records == db.dedup) {
        if (auto d = store::decode_dedup(*entry, txn.format())) expires = d->expires;
      } else if (auto d = store::decode_done(*entry, txn.format())) {
        expires = d->expires;
      }
      if (expires && *expires <= now) txn.del(records, record_key);
    }
  }

  // Keys of a (qid, time, ...) index whose time has come, oldest first.
  std::vector<std::string> due_keys(MDB_dbi index, std::size_t limit = SIZE_MAX) {
    std::vector<std::string> due;
    Cursor c(txn, index);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && due.size() < limit;
         ok = c.next()) {
      if (store::key_time(c.key()) > now) break;
      due.emplace_back(c.key());
    }
    return due;
  }

  // ---- dedup ------------------------------------------------------------------

  std::optional<std::uint64_t> find_dedup(const std::string& dedup_id) {
    auto entry = txn.get(db.dedup, store::key_q_bytes(rec.qid, dedup_id));
    if (!entry) return std::nullopt;
    auto d = store::decode_dedup(*entry, txn.format());
    if (!d) corrupt(fmt::format("the dedup entry of {} is damaged", dedup_id));
    if (d->expires <= now) return std::nullopt;
    return d->seq;
  }

  void remember_dedup(const std::string& dedup_id, std::uint64_t seq,
                      std::optional<Millis> until = std::nullopt) {
    Millis expires = until.value_or(now + rec.config.dedup_window);
    txn.put(db.dedup, store::key_q_bytes(rec.qid, dedup_id),
            store::encode(store::DedupRecord{seq, expires}));
    txn.put(db.dedup_expiry, store::key_q_time_bytes(rec.qid, expires, dedup_id), {});
  }

  // ---- receipts -----------------------------------------------------------------

  struct Delivery {
    std::uint64_t seq;
    Header header;
  };

  // The current delivery a receipt names; throws Error(InvalidData or Stale).
  Delivery current_delivery(const std::string& receipt) {
    check_receipt(receipt);
    auto parsed = store::parse_receipt(receipt);
    auto header = find_header(db.messages, parsed->seq);
    auto id = store::message_id(parsed->seq);
    if (!header) {
      if (find_header(db.dead, parsed->seq))
        throw Error(ErrorKind::Stale, fmt::format("receipt {}: stale: message {} was moved to "
                                                  "the dead-letter queue of {}",
                                                  receipt, id, name));
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} is no longer in queue {} (acked, "
                              "purged or expired)",
                              receipt, id, name));
    }
    if (header->nonce != parsed->nonce) {
      if (header->nonce == 0)
        throw Error(ErrorKind::Stale,
                    fmt::format("receipt {}: stale: message {} was released (nack) after this "
                                "receipt was issued",
                                receipt, id));
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} was delivered again since (receive "
                              "count now {})",
                              receipt, id, header->receive_count));
    }
    return {parsed->seq, std::move(*header)};
  }
};

// Holders of leases (lmdb_holders.cpp): `holder` takes the delivery `nonce`
// of message `seq`; drop_holder forgets who held it (ack, nack, a new
// delivery); release_dead_holders, run by maintain() at most every
// kHolderCheckEvery, releases the leases of holders that are gone.
void hold(QueueView& view, const Holder& holder, std::uint64_t seq, std::uint64_t nonce);
// A read transaction's view: when a waiting receiver should look again for a
// holder's death: INT64_MAX when no holder of the queue holds a lease, a
// time at or before now when one is dead (a write transaction will release
// its leases), else the next check.
Millis next_holder_check(QueueView& view, const HolderProbe& alive);
// Removes every holder entry of queue `qid` (the queue is deleted).
void drop_queue_holders(Txn& txn, std::uint32_t qid);
// What is inconsistent between the holders database and the messages.
std::vector<std::string> verify_holders(Txn& txn, const store::Databases& db);

// The message as callers see it: header, body and the state the caller knows.
Message to_message(std::uint64_t seq, const Header& h, store::Body body, MessageState state);

// A live message's state at `now`.
MessageState state_of(const Header& h, Millis now);

}  // namespace q
