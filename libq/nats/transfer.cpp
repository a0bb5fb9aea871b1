#include "libq/nats/transfer.hpp"

#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/nats/delay.hpp"
#include "libq/nats/groups.hpp"
#include "libq/nats/send.hpp"
#include "libq/ids.hpp"
#include "libq/rules.hpp"
#include "libq/sha256.hpp"
#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;
constexpr jsErrCode kStoreFailed = static_cast<jsErrCode>(10077);

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

jsStreamState Transfer::stream_state(const std::string& queue) {
  std::string what = "reading queue " + queue;
  auto state = client_.stream_state(names_.stream(queue), what);
  if (!state) client_.fail(what, NATS_NOT_FOUND, static_cast<jsErrCode>(10059));
  return *state;
}

MsgPtr Transfer::stored(const std::string& queue, std::uint64_t seq) {
  return client_.stored_message(names_.stream(queue), seq, "reading queue " + queue);
}

void Transfer::each_stored(const std::string& queue,
                           const std::function<void(natsMsg*, std::uint64_t)>& each) {
  jsStreamState state = stream_state(queue);
  std::uint64_t seen = 0;
  for (std::uint64_t seq = state.FirstSeq;
       state.Msgs > 0 && seq <= state.LastSeq && seen < state.Msgs; ++seq) {
    auto msg = stored(queue, seq);
    if (!msg) continue;
    ++seen;
    each(msg.get(), seq);
  }
}

void Transfer::export_queue(const std::string& queue, const QueueConfig&,
                            const std::function<void(const Message&)>& each) {
  Millis now = clock_.now();
  each_stored(queue, [&](natsMsg* msg, std::uint64_t seq) {
    Message m = message_of(msg, seq);
    if (auto g = header(msg, "Q-Group"); !g.empty()) m.group = json::parse(g, nullptr, false);
    m.state = MessageState::Visible;
    if (Millis at = header_visible_at(msg); at > now) {
      m.state = MessageState::Delayed;
      m.visible_at = at;
    }
    if (auto r = client_.get(Names::lease_key(queue, seq))) {
      Lease l = Lease::decode(r->value);
      // Acked or being dead-lettered: leaving the queue (as peek and stats).
      if (l.state == Lease::Acked || l.state == Lease::Dead) return;
      m.receive_count = l.receives;
      m.reason = l.reason;
      if (l.first_received_at) m.first_received_at = l.first_received_at;
      if (l.received_at) m.last_received_at = l.received_at;
      m.state = MessageState::Visible;
      m.visible_at = m.sent_at;
      if (l.until > now) {
        m.state = l.state == Lease::Leased ? MessageState::InFlight : MessageState::Delayed;
        m.visible_at = l.until;
      }
    }
    each(m);
  });
  dead_.each(queue, [&](const Message& m, std::uint64_t) {
    Message d = m;
    d.state = MessageState::Dead;
    each(d);
    return true;
  });
}

std::uint64_t Transfer::publish(const std::string& queue, natsMsg* msg, bool* duplicate) {
  std::uint64_t seq = 0;
  jsErrCode code{};
  std::string text;
  natsStatus s = client_.retry(
      "importing into queue " + queue,
      [&](jsErrCode* err) {
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, client_.js(), msg, nullptr, err);
        if (st == NATS_OK) {
          seq = pa->Sequence;
          *duplicate = pa->Duplicate;
        } else {
          text = nats_GetLastError(nullptr);
        }
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s == NATS_OK) return seq;
  if (code == kStoreFailed && text.find("maximum messages") != std::string::npos)
    throw Error(ErrorKind::Full,
                fmt::format("queue {}: full (max depth reached while importing); the messages "
                            "before it were imported (run the same import again to finish: "
                            "what is stored is not stored twice)",
                            queue));
  client_.fail("importing into queue " + queue, s, code);
}

// A dead letter goes in by the same steps as one made by a receive
// (nats/dead.hpp): published to the queue's stream, held back (a delay
// longer than any receive waits), its lease CAS'd to the dead state with the
// letter's reason, receive count and times, then moved. A receive that meets
// it in between finishes the same move.
std::uint64_t Transfer::import_dead(const std::string& queue, const QueueConfig&, natsMsg* msg,
                                    const Message& m) {
  Millis now = clock_.now();
  natsMsgHeader_Set(msg, kVisibleAtHeader, std::to_string(now + kMaxDelay).c_str());
  bool duplicate = false;
  std::uint64_t seq = publish(queue, msg, &duplicate);
  Lease dead;
  dead.state = Lease::Dead;
  dead.until = m.dead_at.value_or(now);
  dead.receives = m.receive_count;
  dead.first_received_at = m.first_received_at.value_or(0);
  dead.received_at = m.last_received_at.value_or(0);
  dead.reason = std::string(utf8_prefix(m.reason, kMaxReason));
  std::string key = Names::lease_key(queue, seq);
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto cur = client_.get(key);
    if (cur && Lease::decode(cur->value).state == Lease::Dead) {
      dead = Lease::decode(cur->value);  // an earlier run decided it: finish that
      auto stored_msg = stored(queue, seq);
      if (stored_msg) dead_.finish(queue, stored_msg.get(), seq, dead, cur->revision, "");
      return seq;
    }
    auto stored_msg = stored(queue, seq);
    if (!stored_msg) return seq;  // moved already (a repeated import)
    if (auto rev = client_.put_if(key, dead.encode(), cur ? cur->revision : 0)) {
      dead_.finish(queue, stored_msg.get(), seq, dead, *rev, "");
      return seq;
    }
  }
  throw Error(ErrorKind::Busy,
              fmt::format("queue {}: the record of imported dead letter {} kept changing; run the "
                          "import again to finish it",
                          queue, q::message_id(seq)));
}

std::vector<std::string> Transfer::import(const std::string& queue, const QueueConfig& config,
                                          std::vector<Message> messages, bool skip_existing) {
  Millis now = clock_.now();
  // Each message's Nats-Msg-Id comes from the input as given (its place, id,
  // time and body), so the same import run again names the same messages.
  std::vector<std::string> msg_ids;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    msg_ids.push_back("i" + sha256_hex(fmt::format("{}\n{}\n{}\n{}\n{}", queue, i, m.id, m.sent_at,
                                                   sha256_hex(m.body))));
  }
  std::set<std::string> live_ids;
  each_stored(queue, [&](natsMsg* msg, std::uint64_t seq) {
    std::string id = header(msg, "Q-Id");
    live_ids.insert(id.empty() ? q::message_id(seq) : id);
  });
  auto present = [&](const std::string& id) {
    return !id.empty() && (live_ids.count(id) > 0 || dead_.find(queue, id).has_value());
  };
  if (skip_existing) {
    std::vector<Message> kept;
    std::vector<std::string> kept_ids;
    for (std::size_t i = 0; i < messages.size(); ++i)
      if (!present(messages[i].id)) {
        kept.push_back(std::move(messages[i]));
        kept_ids.push_back(msg_ids[i]);
      }
    messages = std::move(kept);
    msg_ids = std::move(kept_ids);
  }

  // Everything is checked before anything is published.
  const auto repeat_of = repeats(messages);
  const std::size_t max_payload =
      static_cast<std::size_t>(natsConnection_GetMaxPayload(client_.nc()));
  std::uint64_t live = 0;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (repeat_of[i]) continue;
    const Message& m = messages[i];
    auto where = fmt::format("queue {}: imported message {} ({})", queue, i + 1, m.id);
    auto refuse = [&](const std::string& why) {
      throw Error(ErrorKind::InvalidData, fmt::format("{}: {}; nothing was imported", where, why));
    };
    if (m.body.size() > config.max_size)
      refuse(
          fmt::format("{} bytes, over the queue's max size of {}", m.body.size(), config.max_size));
    check_outgoing(queue, {m.body, m.attributes, m.dedup_id, m.group});
    if (m.body.size() + 1024 + Publisher::attributes_json(m.attributes).size() > max_payload)
      refuse(
          fmt::format("{} bytes, over what the NATS servers take in one message ({} bytes "
                      "with q's headers; their max_payload)",
                      m.body.size(), max_payload));
    if (config.fifo && m.group.empty()) refuse("has no group, and this is a FIFO queue");
    if (!config.fifo && !m.group.empty())
      refuse(fmt::format("has group '{}', and this is a standard queue", m.group));
    for (auto [field, time] :
         {std::pair{"sent_at", std::optional<Millis>(m.sent_at)},
          std::pair{"first_received_at", m.first_received_at},
          std::pair{"last_received_at", m.last_received_at}, std::pair{"dead_at", m.dead_at}})
      if (time && (*time < 0 || *time > now))
        refuse(fmt::format("{} {} is in the future (now {})", field, format_time(*time),
                           format_time(now)));
    if (m.state == MessageState::Delayed && m.visible_at - now >= config.retention)
      refuse(fmt::format("visible at {} is further ahead than the queue's retention ({})",
                         format_time(m.visible_at), format_duration(config.retention)));
    live += m.state != MessageState::Dead;
  }
  jsStreamState state = stream_state(queue);
  if (config.max_depth != 0 && state.Msgs + live > config.max_depth)
    throw Error(ErrorKind::Full,
                fmt::format("queue {}: {} messages would not fit under max depth {}; nothing was "
                            "imported",
                            queue, live, config.max_depth));
  // Ids are kept when all can be: a q id the stream's sequence has passed
  // (a later send gets a higher one) and free in this queue.
  bool keep_ids = true;
  for (std::size_t i = 0; i < messages.size() && keep_ids; ++i) {
    if (repeat_of[i]) continue;
    auto seq = q::parse_message_id(messages[i].id);
    keep_ids = seq && *seq > 0 && *seq <= state.LastSeq && !present(messages[i].id);
  }

  std::vector<std::string> ids;
  Groups groups(client_, names_);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (repeat_of[i]) {
      ids.push_back(ids[*repeat_of[i]]);
      continue;
    }
    Message& m = messages[i];
    const bool dead = m.state == MessageState::Dead;
    std::string subj = m.group.empty() ? names_.subject(queue) : groups.subject(queue, m.group);
    natsMsg* raw = nullptr;
    natsStatus s =
        natsMsg_Create(&raw, subj.c_str(), nullptr, m.body.data(), static_cast<int>(m.body.size()));
    MsgPtr msg(raw);
    if (s != NATS_OK) client_.fail("importing into queue " + queue, s, {});
    // A dedup id still inside its window (counted from the original send)
    // is the message's Nats-Msg-Id, as a send's: a repeat send after the
    // migration is recognised.
    std::string msg_id = msg_ids[i];
    if (!dead && !m.dedup_id.empty() && config.dedup_window > 0 &&
        m.sent_at + config.dedup_window > now)
      msg_id = "d" + sha256_hex(m.dedup_id);
    natsMsgHeader_Set(raw, "Nats-Msg-Id", msg_id.c_str());
    if (keep_ids) natsMsgHeader_Set(raw, "Q-Id", m.id.c_str());
    natsMsgHeader_Set(raw, "Q-Send", random_token().c_str());
    natsMsgHeader_Set(raw, "Q-Sent-At", std::to_string(m.sent_at).c_str());
    if (!m.dedup_id.empty())
      natsMsgHeader_Set(raw, "Q-Dedup", json(m.dedup_id).dump(-1, ' ', true).c_str());
    if (!m.attributes.empty())
      natsMsgHeader_Set(raw, "Q-Attrs", Publisher::attributes_json(m.attributes).c_str());
    if (!m.group.empty())
      natsMsgHeader_Set(raw, "Q-Group", json(m.group).dump(-1, ' ', true).c_str());
    if (dead) {
      std::uint64_t seq = import_dead(queue, config, msg.get(), m);
      // Without its own id, the sequence it had on the queue's stream names
      // it (DeadLetters::finish).
      ids.push_back(keep_ids ? m.id : q::message_id(seq));
      continue;
    }
    const bool delayed = m.state == MessageState::Delayed && m.visible_at > now;
    if (delayed) natsMsgHeader_Set(raw, kVisibleAtHeader, std::to_string(m.visible_at).c_str());
    natsMsgHeader_Set(raw, "Q-Import", msg_ids[i].c_str());
    bool duplicate = false;
    std::uint64_t seq = publish(queue, msg.get(), &duplicate);
    if (duplicate && msg_id != msg_ids[i]) {
      // Its dedup id is taken by another message inside the window: as on a
      // file, it is stored all the same (the dedup id stays the other's),
      // unless what holds it is this very line from an earlier run.
      auto holder = stored(queue, seq);
      if (!holder || header(holder.get(), "Q-Import") != msg_ids[i]) {
        natsMsgHeader_Set(raw, "Nats-Msg-Id", msg_ids[i].c_str());
        seq = publish(queue, msg.get(), &duplicate);
      }
    }
    ids.push_back(keep_ids ? m.id : q::message_id(seq));
    if (duplicate) continue;
    // In-flight messages arrive visible (a lease does not move between
    // places); what was delivered before keeps its receive count and reason.
    if (delayed || m.receive_count > 0 || !m.reason.empty()) {
      Lease l = delayed ? delayed_lease(m.visible_at) : Lease{};
      l.state = Lease::Released;
      if (!delayed) l.until = 0;
      l.receives = m.receive_count;
      l.first_received_at = m.first_received_at.value_or(0);
      l.received_at = m.last_received_at.value_or(0);
      l.reason = std::string(utf8_prefix(m.reason, kMaxReason));
      // A receive that came first wrote the lease from the header: it stands.
      client_.put_if(Names::lease_key(queue, seq), l.encode(), 0);
    }
  }
  return ids;
}

}  // namespace q::nats
