#include "libq/lmdb/queue_view.hpp"

namespace q {

void QueueView::corrupt(const std::string& what) const {
  throw Error(ErrorKind::Io, fmt::format("{}: queue {}: {} (run 'q verify' or restore a backup)",
                                         txn.env().path(), name, what));
}

std::optional<Header> QueueView::find_header(MDB_dbi dbi, std::uint64_t seq) {
  auto bytes = txn.get(dbi, store::key_q_seq(rec.qid, seq));
  if (!bytes) return std::nullopt;
  auto header = store::decode_header(*bytes);
  if (!header)
    corrupt(fmt::format("the record of message {} is damaged (checksum mismatch)",
                        store::message_id(seq)));
  return header;
}

void QueueView::release_body(std::uint64_t seq) {
  if (auto bytes = txn.get(db.bodies, store::key_seq(seq))) txn.release_read(*bytes);
}

store::Body QueueView::body(std::uint64_t seq) {
  auto bytes = txn.get(db.bodies, store::key_seq(seq));
  if (!bytes) corrupt(fmt::format("the body of message {} is missing", store::message_id(seq)));
  auto body = store::decode_body(*bytes);
  if (!body)
    corrupt(fmt::format("the body of message {} is damaged (checksum mismatch)",
                        store::message_id(seq)));
  return std::move(*body);
}

void QueueView::put_header(MDB_dbi dbi, std::uint64_t seq, const Header& header) {
  txn.put(dbi, store::key_q_seq(rec.qid, seq), store::encode(header));
}

std::vector<std::pair<std::uint64_t, Header>> QueueView::headers(MDB_dbi dbi, const char* what,
                                                                 std::size_t max) {
  std::vector<std::pair<std::uint64_t, Header>> found;
  if (max == 0) return found;
  each_header(dbi, what, [&](std::uint64_t seq, Header header) {
    found.emplace_back(seq, std::move(header));
    return found.size() < max;
  });
  return found;
}

void QueueView::link(std::uint64_t seq, Header& header) {
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

bool QueueView::unlink(std::uint64_t seq, const Header& header) {
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

std::uint64_t QueueView::promote(MDB_dbi from) {
  auto due = due_keys(from, SIZE_MAX, now);
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

void QueueView::remove_live(std::uint64_t seq, const Header& header, GroupEdit* open) {
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

void QueueView::unfile_dead(std::uint64_t seq, const Header& header) {
  txn.del(db.dead, store::key_q_seq(rec.qid, seq));
  txn.del(db.dead_expiry, store::key_q_time_seq(rec.qid, header.dead_at, seq));
  --rec.dead;
}

void QueueView::remove_dead(std::uint64_t seq, const Header& header) {
  unfile_dead(seq, header);
  txn.del(db.bodies, store::key_seq(seq));
  if (header.has_history) txn.del(db.attempts, store::key_seq(seq));
}

void QueueView::dead_letter(std::uint64_t seq, Header header, std::string reason, GroupEdit* open) {
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

void QueueView::revive(std::uint64_t seq, const Header& dead) {
  Header live;
  live.sent_at = dead.sent_at;
  live.visible_at = now;
  live.available_at = now;
  live.group = rec.config.fifo ? dead.group : std::string();
  live.has_history = dead.has_history;  // the attempt history follows the message
  // A FIFO message goes back into its group at its place in send order.
  add_live(seq, live);
}

void QueueView::add_live(std::uint64_t seq, Header& header) {
  GroupEdit group(*this, header.group);
  put_header(db.messages, seq, header);
  link(seq, header);
  group.added(seq);
  group.done();
  txn.put(db.age, store::key_q_time_seq(rec.qid, header.available_at, seq), {});
}

void QueueView::maintain() {
  auto leases_due = promote(db.leases);
  rec.leased -= leases_due;
  rec.ready += leases_due;
  auto delays_due = promote(db.delayed);
  rec.delayed -= delays_due;
  rec.ready += delays_due;
  if (auto rate = rate_limiter(); rate.limited()) {
    rate.settle(now);  // a future stored by a clock ahead is pulled back, once
    rec.rate_tat_us = static_cast<std::int64_t>(rate.tat_us());
  }
  expire_messages();
  expire_dead_letters();
  expire_keys(db.dedup_expiry, db.dedup);
  expire_keys(db.done_expiry, db.done);
  if (holder_alive) release_dead_holders(*this);
}

RateLimiter QueueView::rate_limiter() const {
  // The record's budget is always of the record's rate (do_configure
  // carries it over a change through shared_rate).
  return shared_rate(rec.config.rate, {rec.config.rate, static_cast<double>(rec.rate_tat_us)});
}

void QueueView::rate_take(std::uint64_t starts) {
  auto rate = rate_limiter();
  if (!rate.limited() || starts == 0) return;
  rate.take(now, starts);
  rec.rate_tat_us = static_cast<std::int64_t>(rate.tat_us());
}

void QueueView::expire_messages() {
  auto old = due_seqs(db.age, now - rec.config.retention);
  for (auto seq : old) {
    auto header = find_header(db.messages, seq);
    if (!header)
      corrupt(fmt::format("message {} is in the age index but missing", store::message_id(seq)));
    remove_live(seq, *header);
  }
  rec.counters.expired += old.size();
}

void QueueView::expire_dead_letters() {
  auto old = due_seqs(db.dead_expiry, now - kDeadLetterRetention);
  for (auto seq : old)
    if (auto header = find_header(db.dead, seq)) remove_dead(seq, *header);
  rec.counters.expired += old.size();
}

void QueueView::expire_keys(MDB_dbi expiry_index, MDB_dbi records) {
  for (const auto& key : due_keys(expiry_index, kExpireBatch, now)) {
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

std::vector<std::string> QueueView::due_keys(MDB_dbi index, std::size_t limit, Millis upto) {
  std::vector<std::string> due;
  Cursor c(txn, index);
  for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && due.size() < limit; ok = c.next()) {
    if (store::key_time(c.key()) > upto) break;
    due.emplace_back(c.key());
  }
  return due;
}

std::vector<std::uint64_t> QueueView::due_seqs(MDB_dbi index, Millis upto) {
  std::vector<std::uint64_t> seqs;
  for (const auto& key : due_keys(index, kExpireBatch, upto))
    seqs.push_back(store::key_time_seq(key));
  return seqs;
}

std::optional<std::uint64_t> QueueView::find_dedup(const std::string& dedup_id) {
  auto entry = txn.get(db.dedup, store::key_q_bytes(rec.qid, dedup_id));
  if (!entry) return std::nullopt;
  auto d = store::decode_dedup(*entry, txn.format());
  if (!d) corrupt(fmt::format("the dedup entry of {} is damaged", dedup_id));
  if (d->expires <= now) return std::nullopt;
  return d->seq;
}

void QueueView::remember_dedup(const std::string& dedup_id, std::uint64_t seq,
                               std::optional<Millis> until) {
  Millis expires = until.value_or(now + rec.config.dedup_window);
  txn.put(db.dedup, store::key_q_bytes(rec.qid, dedup_id),
          store::encode(store::DedupRecord{seq, expires}));
  txn.put(db.dedup_expiry, store::key_q_time_bytes(rec.qid, expires, dedup_id), {});
}

QueueView::Delivery QueueView::current_delivery(const std::string& receipt) {
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
  if (rec.config.fifo && (header->flags & Header::kLeased) && header->visible_at <= now)
    check_lapsed_in_order(receipt, parsed->seq, *header);
  return {parsed->seq, std::move(*header)};
}

// A FIFO lease that ran out still holds while its message is the first of
// its group (nobody can have had an earlier one since); behind the first, it
// is stale: the first is delivered again before it, and acking (or
// extending) it now would finish it ahead of the one in front. One seek.
void QueueView::check_lapsed_in_order(const std::string& receipt, std::uint64_t seq,
                                      const Header& header) {
  auto group_prefix = store::key_group_prefix(rec.qid, header.group);
  Cursor c(txn, db.group_messages);
  if (!c.seek(group_prefix) || !c.has_prefix(group_prefix))
    corrupt(fmt::format("group {} has no messages in its index", header.group));
  auto first = store::key_q_seq_seq(c.key().substr(group_prefix.size() - 4));
  if (first == seq) return;
  throw Error(ErrorKind::Stale,
              fmt::format("receipt {}: stale: its lease ran out and message {}, ahead of it in "
                          "group {}, is delivered again first (FIFO order)",
                          receipt, store::message_id(first), header.group));
}

Message to_message(std::uint64_t seq, const Header& h, store::Body body, MessageState state) {
  Message m;
  m.id = store::message_id(seq);
  m.body = std::move(body.body);
  m.attributes = std::move(body.attributes);
  m.dedup_id = std::move(body.dedup_id);
  m.group = h.group;
  m.receive_count = h.receive_count;
  m.state = state;
  m.sent_at = h.sent_at;
  m.visible_at = h.visible_at;
  if (h.first_received_at) m.first_received_at = h.first_received_at;
  if (h.last_received_at) m.last_received_at = h.last_received_at;
  if (h.dead_at) m.dead_at = h.dead_at;
  m.reason = h.reason;
  return m;
}

MessageState state_of(const Header& h, Millis now) {
  if (h.visible_at <= now) return MessageState::Visible;
  if (h.flags & Header::kLeased) return MessageState::InFlight;
  return MessageState::Delayed;
}

}  // namespace q
