#include "libq/lmdb/transfer.hpp"

#include "libq/lmdb/broker_impl.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

namespace q {
namespace {

// Imported ids are kept only below this: next-seq must stay above every key
// and never wrap (2^52 is 140 years of sends at a million a second).
constexpr std::uint64_t kMaxKeptSeq = std::uint64_t{1} << 52;

// An import is checked as a send would be, plus its times: nothing can have
// happened after now.
void check_imported(QueueView& view, const Message& m, std::size_t index) {
  const auto& config = view.rec.config;
  auto where = fmt::format("queue {}: imported message {} ({})", view.name, index + 1, m.id);
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorKind::InvalidData, fmt::format("{}: {}; nothing was imported", where, why));
  };
  if (m.body.size() > config.max_size)
    refuse(
        fmt::format("{} bytes, over the queue's max size of {}", m.body.size(), config.max_size));
  if (config.fifo && m.group.empty()) refuse("has no group, and this is a FIFO queue");
  if (!config.fifo && !m.group.empty())
    refuse(fmt::format("has group '{}', and this is a standard queue", m.group));
  check_outgoing(view.name, {m.body, m.attributes, m.dedup_id, m.group});
  for (auto [field, time] :
       {std::pair{"sent_at", std::optional<Millis>(m.sent_at)},
        std::pair{"first_received_at", m.first_received_at},
        std::pair{"last_received_at", m.last_received_at}, std::pair{"dead_at", m.dead_at}})
    if (time && (*time < 0 || *time > view.now))
      refuse(fmt::format("{} {} is in the future (now {})", field, format_time(*time),
                         format_time(view.now)));
  if (m.state == MessageState::Delayed && m.visible_at - view.now >= config.retention)
    refuse(fmt::format("visible at {} is further ahead than the queue's retention ({})",
                       format_time(m.visible_at), format_duration(config.retention)));
}

// Imported messages keep their ids when every one of them can: each is a
// message id, free in this file, and far from the end of the sequence space
// (next-seq must stay above every id), and within each FIFO group they come
// in send order. Otherwise all of them get new ids in the order given, so
// that a group is never reordered by a mix of kept and new ids.
bool ids_can_be_kept(QueueView& view, const std::vector<Message>& messages,
                     const std::vector<std::optional<std::size_t>>& repeat_of) {
  std::unordered_map<std::string_view, std::uint64_t> last_in_group;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (repeat_of[i]) continue;
    const auto& m = messages[i];
    auto seq = store::parse_message_id(m.id);
    if (!seq || *seq == 0 || *seq >= kMaxKeptSeq) return false;
    if (view.txn.get(view.db.bodies, store::key_seq(*seq))) return false;
    if (m.state == MessageState::Dead || m.group.empty()) continue;
    auto [it, fresh] = last_in_group.emplace(m.group, *seq);
    if (!fresh && *seq < it->second) return false;
    it->second = *seq;
  }
  return true;
}

// An imported live message is delivered like a new one: available now (or
// when its delay ends), its retention counting from then.
void store_imported(QueueView& view, std::uint64_t seq, Message m) {
  Txn& txn = view.txn;
  Header header;
  header.receive_count = m.receive_count;
  header.sent_at = m.sent_at;
  header.first_received_at = m.first_received_at.value_or(0);
  header.last_received_at = m.last_received_at.value_or(0);
  header.reason = std::string(utf8_prefix(m.reason, kMaxReason));
  header.group = m.group;
  if (m.state == MessageState::Dead) {
    header.dead_at = m.dead_at.value_or(view.now);
    view.put_header(view.db.dead, seq, header);
    txn.put(view.db.dead_expiry, store::key_q_time_seq(view.rec.qid, header.dead_at, seq), {});
    ++view.rec.dead;
    // Counted as on NATS (one rule for both backends): it came into the
    // queue (sent) and went to its dead-letter queue (dead-lettered).
    ++view.rec.counters.sent;
    ++view.rec.counters.dead_lettered;
  } else {
    bool delayed = m.state == MessageState::Delayed && m.visible_at > view.now;
    header.visible_at = delayed ? m.visible_at : view.now;
    header.available_at = header.visible_at;
    header.flags = delayed ? Header::kDelayed : 0;
    view.add_live(seq, header);
    ++view.rec.counters.sent;
    // A dedup id still inside its window (counted from the original send)
    // recognises a repeat send after the migration.
    Millis dedup_until = m.sent_at + view.rec.config.dedup_window;
    if (!m.dedup_id.empty() && dedup_until > view.now && !view.find_dedup(m.dedup_id))
      view.remember_dedup(m.dedup_id, seq, dedup_until);
  }
  store::Body body{std::move(m.attributes), m.dedup_id, std::move(m.body)};
  txn.put(view.db.bodies, store::key_seq(seq), store::encode(body));
}

// A record whose id came before in this import is the same message again.
std::vector<std::optional<std::size_t>> repeats(const std::vector<Message>& messages) {
  std::vector<std::optional<std::size_t>> repeat_of(messages.size());
  std::unordered_map<std::string_view, std::size_t> first;
  for (std::size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].id.empty())
      if (auto [it, fresh] = first.emplace(messages[i].id, i); !fresh) repeat_of[i] = it->second;
  return repeat_of;
}

}  // namespace

void export_queue(QueueView& view, const std::function<void(const Message&)>& each) {
  for (MDB_dbi dbi : {view.db.messages, view.db.dead}) {
    view.each_header(dbi, "the record of message", [&](std::uint64_t seq, const Header& header) {
      auto state = dbi == view.db.dead ? MessageState::Dead : state_of(header, view.now);
      auto message = to_message(seq, header, view.body(seq), state);
      view.release_body(seq);
      each(message);
      return true;
    });
  }
}

std::vector<std::string> import_into(QueueView& view, std::vector<Message> messages,
                                     std::uint64_t& next_seq) {
  const auto repeat_of = repeats(messages);
  std::uint64_t live = 0;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (repeat_of[i]) continue;
    check_imported(view, messages[i], i);
    live += messages[i].state != MessageState::Dead;
  }
  const auto& config = view.rec.config;
  if (config.max_depth != 0 && view.depth() + live > config.max_depth)
    throw Error(ErrorKind::Full,
                fmt::format("queue {}: {} messages would not fit under max depth {}; nothing was "
                            "imported",
                            view.name, live, config.max_depth));

  const bool keep_ids = ids_can_be_kept(view, messages, repeat_of);
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (repeat_of[i]) {
      ids.push_back(ids[*repeat_of[i]]);
      continue;
    }
    std::uint64_t seq = keep_ids ? *store::parse_message_id(messages[i].id) : next_seq;
    next_seq = std::max(next_seq, seq + 1);
    store_imported(view, seq, std::move(messages[i]));
    ids.push_back(store::message_id(seq));
  }
  return ids;
}

// ---- the broker's export and import ------------------------------------------

void LmdbBroker::do_export_messages(const std::string& queue,
                                    const std::function<void(const Message&)>& each) {
  Txn txn(*env_, Txn::Read);
  QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
  export_queue(view, each);
}

std::vector<std::string> LmdbBroker::do_import_messages(const std::string& queue,
                                                        std::vector<Message> messages,
                                                        bool create_queue, bool skip_existing) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue, create_queue);
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

}  // namespace q
