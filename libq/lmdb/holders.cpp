// Holders of leases (issue 14): which process holds which delivery, so that
// the leases of a process that is gone are released at once. Layout of the
// `holders` database: records.hpp. Nothing here runs per message except one
// lookup on ack, nack and delivery; liveness is checked per queue at most
// every kHolderCheckEvery, and a dead holder's leases are found by prefix.
#include <fmt/format.h>

#include <unordered_set>

#include "libq/lmdb/history.hpp"
#include "libq/lmdb/queue_view.hpp"
#include "libq/lmdb/records.hpp"

namespace q {
namespace {

struct FoundHolder {
  std::string key;
  Holder holder;
};

// The queue's holders (the 'h' keys), decoded.
std::vector<FoundHolder> holders_of(QueueView& view, MDB_dbi dbi) {
  std::vector<FoundHolder> found;
  auto prefix = store::key_holders(view.rec.qid);
  Cursor c(view.txn, dbi);
  for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
    auto record = store::decode_holder(c.value());
    if (!record) view.corrupt("a record of the holders database is damaged (checksum mismatch)");
    auto [pid, start] = store::key_holder_id(c.key());
    found.push_back({std::string(c.key()), Holder{pid, start, record->pid_namespace}});
  }
  return found;
}

std::string lease_prefix(const QueueView& view, const Holder& h) {
  auto key = store::key_holder_lease(view.rec.qid, h.pid, h.start_time, 0);
  key.resize(key.size() - 8);
  return key;
}

bool holds_any(QueueView& view, MDB_dbi dbi, const Holder& h) {
  auto prefix = lease_prefix(view, h);
  Cursor c(view.txn, dbi);
  return c.seek(prefix) && c.has_prefix(prefix);
}

// Releases the deliveries `h` still holds, as a nack without delay would,
// keeping their receive count; returns how many.
std::uint64_t release_leases(QueueView& view, MDB_dbi dbi, const Holder& h) {
  std::vector<std::string> keys;
  {
    auto prefix = lease_prefix(view, h);
    Cursor c(view.txn, dbi);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next())
      keys.emplace_back(c.key());
  }
  std::uint64_t released = 0;
  for (const auto& key : keys) {
    auto seq = store::key_holder_lease_seq(key);
    view.txn.del(dbi, key);
    auto lease_key = store::key_lease_holder(view.rec.qid, seq);
    auto entry = view.txn.get(dbi, lease_key);
    if (!entry) continue;
    auto lease = store::decode_lease_holder(*entry);
    if (!lease) view.corrupt("a record of the holders database is damaged (checksum mismatch)");
    if (lease->pid != h.pid || lease->start_time != h.start_time) continue;  // not its own
    view.txn.del(dbi, lease_key);
    auto header = view.find_header(view.db.messages, seq);
    // Acked, released or delivered again since: nothing of it to release.
    if (!header || !(header->flags & Header::kLeased) || header->nonce != lease->nonce) continue;
    GroupEdit group(view, header->group);
    if (view.unlink(seq, *header)) group.left_flight();
    // Its attempt ends now, released as "holder died": left open, the next
    // receive would close it as a lease that ran out (issue 25 item 15).
    close_attempt(view, seq, *header, AttemptEnd::Released, view.now, kHolderDied);
    header->visible_at = view.now;
    header->flags = 0;
    header->nonce = 0;  // the receipt is spent
    header->reason = kHolderDied;
    view.link(seq, *header);
    view.put_header(view.db.messages, seq, *header);
    group.done();
    ++released;
  }
  return released;
}

}  // namespace

void hold(QueueView& view, const Holder& holder, std::uint64_t seq, std::uint64_t nonce) {
  auto dbi = *view.txn.env().holders(view.txn, true);
  auto qid = view.rec.qid;
  auto holder_key = store::key_holder(qid, holder.pid, holder.start_time);
  if (!view.txn.get(dbi, holder_key))
    view.txn.put(dbi, holder_key,
                 store::encode(store::HolderRecord{holder.pid_namespace, view.now}));
  auto check_key = store::key_holder_check(qid);
  if (!view.txn.get(dbi, check_key))
    view.txn.put(dbi, check_key, store::encode(store::HolderCheck{view.now}));
  view.txn.put(dbi, store::key_holder_lease(qid, holder.pid, holder.start_time, seq), {});
  view.txn.put(dbi, store::key_lease_holder(qid, seq),
               store::encode(store::LeaseHolder{holder.pid, holder.start_time, nonce}));
}

void drop_holder(QueueView& view, std::uint64_t seq) {
  auto dbi = view.txn.env().holders(view.txn, false);
  if (!dbi) return;
  auto lease_key = store::key_lease_holder(view.rec.qid, seq);
  auto entry = view.txn.get(*dbi, lease_key);
  if (!entry) return;
  auto lease = store::decode_lease_holder(*entry);
  if (!lease) view.corrupt("a record of the holders database is damaged (checksum mismatch)");
  view.txn.del(*dbi, store::key_holder_lease(view.rec.qid, lease->pid, lease->start_time, seq));
  view.txn.del(*dbi, lease_key);
}

std::uint64_t release_dead_holders(QueueView& view) {
  auto dbi = view.txn.env().holders(view.txn, false);
  if (!dbi) return 0;
  auto check_key = store::key_holder_check(view.rec.qid);
  auto entry = view.txn.get(*dbi, check_key);
  if (!entry) return 0;  // no holder has named itself on this queue
  auto check = store::decode_holder_check(*entry);
  if (!check) view.corrupt("a record of the holders database is damaged (checksum mismatch)");
  // A clock stepped back does not postpone the check.
  if (view.now >= check->checked_at && view.now - check->checked_at < kHolderCheckEvery) return 0;
  std::uint64_t released = 0;
  std::size_t remaining = 0;
  for (const auto& [key, holder] : holders_of(view, *dbi)) {
    if ((*view.holder_alive)(holder)) {
      // A holder with no lease left is forgotten; its next receive names it again.
      if (holds_any(view, *dbi, holder)) {
        ++remaining;
        continue;
      }
    } else {
      released += release_leases(view, *dbi, holder);
    }
    view.txn.del(*dbi, key);
  }
  if (remaining == 0)
    view.txn.del(*dbi, check_key);
  else
    view.txn.put(*dbi, check_key, store::encode(store::HolderCheck{view.now}));
  return released;
}

Millis next_holder_check(QueueView& view, const HolderProbe& alive) {
  auto dbi = view.txn.env().holders(view.txn, false);
  if (!dbi) return INT64_MAX;
  auto entry = view.txn.get(*dbi, store::key_holder_check(view.rec.qid));
  if (!entry) return INT64_MAX;
  auto check = store::decode_holder_check(*entry);
  if (!check) view.corrupt("a record of the holders database is damaged (checksum mismatch)");
  bool holding = false;
  for (const auto& found : holders_of(view, *dbi)) {
    if (!holds_any(view, *dbi, found.holder)) continue;
    if (!alive(found.holder)) return check->checked_at + kHolderCheckEvery;
    holding = true;
  }
  return holding ? view.now + kHolderCheckEvery : INT64_MAX;
}

void drop_queue_holders(Txn& txn, std::uint32_t qid) {
  auto dbi = txn.env().holders(txn, false);
  if (!dbi) return;
  for (char tag : {'c', 'h', 'l', 'm'}) {
    std::string prefix(1, tag);
    prefix += store::key_q(qid);
    std::vector<std::string> keys;
    {
      Cursor c(txn, *dbi);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next())
        keys.emplace_back(c.key());
    }
    for (const auto& key : keys) txn.del(*dbi, key);
  }
}

std::vector<std::string> verify_holders(Txn& txn, const store::Databases& db) {
  std::vector<std::string> problems;
  auto dbi = txn.env().holders(txn, false);
  if (!dbi) return problems;
  std::unordered_set<std::uint32_t> qids;
  {
    Cursor c(txn, db.queues);
    for (bool ok = c.first(); ok; ok = c.next())
      if (auto rec = store::decode_queue(c.value())) qids.insert(rec->qid);
  }
  auto bad = [&](const std::string& what) { problems.push_back("holders: " + what); };
  Cursor c(txn, *dbi);
  for (bool ok = c.first(); ok; ok = c.next()) {
    auto key = c.key();
    char tag = key.empty() ? '\0' : key[0];
    std::size_t want = tag == 'c' ? 5 : tag == 'h' ? 17 : tag == 'l' ? 25 : tag == 'm' ? 13 : 0;
    if (want == 0 || key.size() != want) {
      bad(fmt::format("a key of {} bytes that is none of q's", key.size()));
      continue;
    }
    auto qid = store::key_qid(key.substr(1));
    if (!qids.count(qid)) {
      bad(fmt::format("an entry for queue id {}, which no queue has", qid));
      continue;
    }
    if (tag == 'c' && !store::decode_holder_check(c.value()))
      bad(fmt::format("the check record of queue id {} is damaged", qid));
    if (tag == 'h' && !store::decode_holder(c.value()))
      bad(fmt::format("a holder record of queue id {} is damaged", qid));
    if (tag == 'h' && !txn.get(*dbi, store::key_holder_check(qid)))
      bad(fmt::format("queue id {} has holders but no check record", qid));
    if (tag == 'l') {
      auto [pid, start] = store::key_holder_id(key);
      auto seq = store::key_holder_lease_seq(key);
      auto lease = txn.get(*dbi, store::key_lease_holder(qid, seq));
      auto decoded = lease ? store::decode_lease_holder(*lease) : std::nullopt;
      if (!decoded || decoded->pid != pid || decoded->start_time != start)
        bad(fmt::format("message {} is listed under holder {} but not held by it",
                        store::message_id(seq), pid));
      if (!txn.get(*dbi, store::key_holder(qid, pid, start)))
        bad(fmt::format("holder {} holds message {} but is not registered", pid,
                        store::message_id(seq)));
    }
    if (tag == 'm') {
      auto seq = store::key_q_seq_seq(key.substr(1));
      auto lease = store::decode_lease_holder(c.value());
      if (!lease) {
        bad(fmt::format("the holder of message {} is damaged", store::message_id(seq)));
        continue;
      }
      if (!txn.get(*dbi, store::key_holder_lease(qid, lease->pid, lease->start_time, seq)))
        bad(fmt::format("message {} is held by {} but not listed under it", store::message_id(seq),
                        lease->pid));
      if (!txn.get(db.messages, store::key_q_seq(qid, seq)))
        bad(fmt::format("message {} has a holder but is not a live message",
                        store::message_id(seq)));
    }
  }
  return problems;
}

}  // namespace q
