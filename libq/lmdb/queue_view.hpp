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

#include "libq/broker.hpp"
#include "libq/lmdb/group_edit.hpp"
#include "libq/holder.hpp"
#include "libq/lmdb/store.hpp"
#include "libq/rate_limiter.hpp"
#include "libq/lmdb/records.hpp"
#include "libq/rules.hpp"

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
// Holders of leases (lmdb/holders.cpp).
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

  [[noreturn]] void corrupt(const std::string& what) const;

  std::optional<Header> find_header(MDB_dbi dbi, std::uint64_t seq);

  // A body copied out in a read transaction: its pages need not stay resident.
  void release_body(std::uint64_t seq);

  store::Body body(std::uint64_t seq);

  void put_header(MDB_dbi dbi, std::uint64_t seq, const Header& header);

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
                                                        std::size_t max = SIZE_MAX);

  // ---- the schedule: ready, delayed and leases indexes ----------------------

  // Files the message under its visible_at according to its flags.
  void link(std::uint64_t seq, Header& header);

  // Due lease and delay entries may already have moved to `ready`. Returns
  // true when the message was in flight (its lease had not run out).
  bool unlink(std::uint64_t seq, const Header& header);

  // Moves due entries of `from` to `ready`; returns how many.
  std::uint64_t promote(MDB_dbi from);

  // ---- removal --------------------------------------------------------------

  // `open` is the caller's edit of the message's group, when it has one.
  void remove_live(std::uint64_t seq, const Header& header, GroupEdit* open = nullptr);

  // Takes a dead letter out of the dead-letter queue; its body stays.
  void unfile_dead(std::uint64_t seq, const Header& header);

  void remove_dead(std::uint64_t seq, const Header& header);

  void dead_letter(std::uint64_t seq, Header header, std::string reason, GroupEdit* open = nullptr);

  // Stores a live message: its header, filed by its flags in the schedule,
  // in its FIFO group, and in `age` at header.available_at (the body is the
  // caller's).
  void add_live(std::uint64_t seq, Header& header);

  // A dead letter (taken out of its dead-letter queue) lives again in this queue.
  void revive(std::uint64_t seq, const Header& dead);

  // ---- maintenance run by every write transaction on the queue ----------------

  void maintain();

  // ---- the shared rate budget -------------------------------------------------
  // One start every 1/rate seconds, with a burst of a tenth of a second's
  // worth so fast queues need not take one message per transaction. The
  // state is the record's rate_tat_us, shared by every consumer of the file.

  RateLimiter rate_limiter() const;

  // How many starts the budget allows now.
  std::uint64_t rate_allows() const { return rate_limiter().allows(now); }

  void rate_take(std::uint64_t starts);

  // The first time the budget allows a start.
  Millis rate_ready_at() const { return rate_limiter().ready_at(now); }

  // Retention counts from the time a message first became available (its
  // send, the end of its delay, its redrive or import): the `age` index holds
  // exactly that time, so expired messages are a prefix of it, whatever the
  // order of their ids.
  void expire_messages();

  void expire_dead_letters();

  // Dedup ids and idempotency (done) keys past their time: their expiry
  // index is (qid, expires, key); the record holds its expiry, which a later
  // renewal may have moved.
  void expire_keys(MDB_dbi expiry_index, MDB_dbi records);

  // The first `limit` keys of a (qid, time, ...) index whose time is `upto`
  // or before, oldest first.
  std::vector<std::string> due_keys(MDB_dbi index, std::size_t limit, Millis upto);
  // The seqs of the first kExpireBatch keys of a (qid, time, seq) index
  // whose time is `upto` or before, oldest first.
  std::vector<std::uint64_t> due_seqs(MDB_dbi index, Millis upto);

  // ---- dedup ------------------------------------------------------------------

  std::optional<std::uint64_t> find_dedup(const std::string& dedup_id);

  void remember_dedup(const std::string& dedup_id, std::uint64_t seq,
                      std::optional<Millis> until = std::nullopt);

  // ---- receipts -----------------------------------------------------------------

  struct Delivery {
    std::uint64_t seq;
    Header header;
  };

  // The current delivery a receipt names; throws Error(InvalidData or Stale).
  Delivery current_delivery(const std::string& receipt);

 private:
  void check_lapsed_in_order(const std::string& receipt, std::uint64_t seq, const Header& header);
};

// Holders of leases (lmdb/holders.cpp): `holder` takes the delivery `nonce`
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
