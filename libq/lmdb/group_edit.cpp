#include "libq/lmdb/group_edit.hpp"

#include <fmt/format.h>

#include "libq/lmdb/queue_view.hpp"

namespace q {
namespace {

// Puts the group's head into `heads` (offer) or takes it out.
void head_entry(QueueView& view, const std::string& group, bool offer) {
  auto group_prefix = store::key_group_prefix(view.rec.qid, group);
  std::uint64_t seq;
  {
    Cursor c(view.txn, view.db.group_messages);
    if (!c.seek(group_prefix) || !c.has_prefix(group_prefix))
      view.corrupt(fmt::format("group {} has no messages in its index", group));
    seq = store::key_q_seq_seq(c.key().substr(group_prefix.size() - 4));
  }
  auto header = view.find_header(view.db.messages, seq);
  if (!header) view.corrupt(fmt::format("group {} lists a missing message", group));
  auto key = store::key_q_time_seq(view.rec.qid, header->visible_at, seq);
  if (offer)
    view.txn.put(view.db.heads, key, store::encode_head(group));
  else
    view.txn.del(view.db.heads, key);
}

}  // namespace

GroupEdit::GroupEdit(QueueView& view, std::string group) : v_(view), group_(std::move(group)) {
  active_ = v_.rec.config.fifo;
  if (!active_) return;
  auto bytes = v_.txn.get(v_.db.groups, store::key_q_bytes(v_.rec.qid, group_));
  if (bytes) {
    auto decoded = store::decode_group(*bytes, v_.txn.format());
    if (!decoded) v_.corrupt(fmt::format("the record of group {} is damaged", group_));
    g_ = *decoded;
  }
  was_ = g_;
  if (g_.messages > 0 && g_.in_flight == 0) head_entry(v_, group_, false);
}

void GroupEdit::added(std::uint64_t seq) {
  if (!active_) return;
  v_.txn.put(v_.db.group_messages, group_key(seq), {});
  ++g_.messages;
}

void GroupEdit::removed(std::uint64_t seq) {
  if (!active_) return;
  v_.txn.del(v_.db.group_messages, group_key(seq));
  --g_.messages;
}

void GroupEdit::done() {
  if (!active_) return;
  auto key = store::key_q_bytes(v_.rec.qid, group_);
  if (g_.messages == 0) {
    v_.txn.del(v_.db.groups, key);
  } else {
    v_.txn.put(v_.db.groups, key, store::encode(g_));
    if (g_.in_flight == 0) head_entry(v_, group_, true);
  }
  v_.rec.groups += (g_.messages > 0) - (was_.messages > 0);
  v_.rec.held_groups += (g_.in_flight > 0) - (was_.in_flight > 0);
  active_ = false;
}

std::string GroupEdit::group_key(std::uint64_t seq) const {
  std::string k = store::key_group_prefix(v_.rec.qid, group_);
  k += store::key_seq(seq);
  return k;
}

}  // namespace q
