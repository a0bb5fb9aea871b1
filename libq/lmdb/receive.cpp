#include "libq/lmdb/receive.hpp"

#include <map>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace q {

namespace {

Header indexed_header(QueueView& view, std::uint64_t seq) {
  auto header = view.find_header(view.db.messages, seq);
  if (!header)
    view.corrupt(fmt::format("message {} is indexed but has no record", store::message_id(seq)));
  return std::move(*header);
}

}  // namespace

// Standard queue: the oldest ready messages first.
void pick_standard(QueueView& view, std::uint64_t want, const Deliver& deliver) {
  std::uint64_t delivered = 0;
  while (delivered < want) {
    std::uint64_t seq;
    {
      Cursor c(view.txn, view.db.ready);
      if (!c.seek(view.prefix) || !c.has_prefix(view.prefix)) break;
      seq = store::key_time_seq(c.key());
    }
    delivered += deliver(seq, indexed_header(view, seq), nullptr);
  }
}

// FIFO: messages in order of visible time and send order, from the heads
// of groups not held and, within this receive, from the groups already
// taken from (one receive may take several of a group, in order). Each
// group stays in order, and the oldest work goes first.
void pick_fifo(QueueView& view, std::uint64_t want, bool one_per_group, const Deliver& deliver) {
  struct Next {
    Millis visible_at;
    std::uint64_t seq;
    std::string group;
  };
  auto later = [](const Next& a, const Next& b) {
    return std::tie(a.visible_at, a.seq) > std::tie(b.visible_at, b.seq);
  };
  std::priority_queue<Next, std::vector<Next>, decltype(later)> continuing(later);
  std::map<std::string, GroupEdit> taken;
  auto follow = [&](const std::string& group, std::uint64_t seq) {
    if (one_per_group) return;
    auto group_prefix = store::key_group_prefix(view.rec.qid, group);
    std::uint64_t next;
    {
      Cursor c(view.txn, view.db.group_messages);
      if (!c.seek(group_prefix + store::key_seq(seq + 1)) || !c.has_prefix(group_prefix)) return;
      next = store::key_q_seq_seq(c.key().substr(group_prefix.size() - 4));
    }
    Millis visible_at = indexed_header(view, next).visible_at;
    if (visible_at <= view.now) continuing.push({visible_at, next, group});
  };
  std::uint64_t delivered = 0;
  while (delivered < want) {
    std::optional<Next> head;
    {
      Cursor c(view.txn, view.db.heads);
      if (c.seek(view.prefix) && c.has_prefix(view.prefix) &&
          store::key_time(c.key()) <= view.now) {
        auto group = store::decode_head(c.value(), view.txn.format());
        if (!group) view.corrupt("an entry of its heads index is damaged");
        head = Next{store::key_time(c.key()), store::key_time_seq(c.key()), std::move(*group)};
      }
    }
    bool from_head = head && (continuing.empty() || !later(*head, continuing.top()));
    if (!from_head && continuing.empty()) break;
    Next pick = from_head ? std::move(*head) : continuing.top();
    if (!from_head) continuing.pop();
    auto edit = taken.find(pick.group);
    if (edit == taken.end())
      edit = taken
                 .emplace(std::piecewise_construct, std::forward_as_tuple(pick.group),
                          std::forward_as_tuple(view, pick.group))
                 .first;
    delivered += deliver(pick.seq, indexed_header(view, pick.seq), &edit->second);
    follow(pick.group, pick.seq);
  }
  for (auto& [group, edit] : taken) edit.done();
}

}  // namespace q
