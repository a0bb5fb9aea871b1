#include "libq/nats/records.hpp"

#include "libq/nats/history.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/ids.hpp"

namespace q::nats {

using json = nlohmann::json;

std::string encode_config(const QueueConfig& c, Millis created_at,
                          const std::optional<Pause>& pause) {
  json j{{"v", 1},
         {"visibility_timeout", c.visibility_timeout},
         {"max_receives", c.max_receives},
         {"retention", c.retention},
         {"delay", c.delay},
         {"max_depth", c.max_depth},
         {"max_size", c.max_size},
         {"dedup_window", c.dedup_window},
         {"rate", c.rate},
         {"fifo", c.fifo},
         {"content_dedup", c.content_dedup},
         {"created_at", created_at},
         {"w", random_token()}};
  if (pause)
    j["pause"] = json{{"since", pause->since}, {"until", pause->until}, {"reason", pause->reason}};
  return j.dump();
}

StoredQueue parse_config(const std::string& queue, const Record& r) {
  try {
    auto j = json::parse(r.value);
    StoredQueue s;
    s.config.visibility_timeout = j.at("visibility_timeout");
    s.config.max_receives = j.at("max_receives");
    s.config.retention = j.at("retention");
    s.config.delay = j.at("delay");
    s.config.max_depth = j.at("max_depth");
    s.config.max_size = j.at("max_size");
    s.config.dedup_window = j.at("dedup_window");
    s.config.rate = j.at("rate");
    s.config.fifo = j.at("fifo");
    s.config.content_dedup = j.at("content_dedup");
    s.created_at = j.at("created_at");
    if (j.contains("pause")) {
      const auto& p = j.at("pause");
      s.pause = Pause{p.at("since"), p.at("until"), p.at("reason")};
    }
    s.revision = r.revision;
    return s;
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Io,
                fmt::format("queue {}: its settings record is damaged ({})", queue, e.what()));
  }
}

std::string Lease::encode() const {
  json j{{"s", std::string(1, static_cast<char>(state))},
         {"k", nonce},
         {"u", until},
         {"r", received_at},
         {"f", first_received_at},
         {"n", receives},
         {"a", reply},
         {"why", reason},
         {"g", group},
         {"p", pid},
         {"ws", worker_since},
         {"h", attempts_json(history)},
         {"w", random_token()}};
  if (!holder.empty()) j["hd"] = holder;
  return j.dump();
}

Lease Lease::decode(const std::string& text) {
  Lease l;
  try {
    auto j = json::parse(text);
    l.state = static_cast<State>(j.at("s").get<std::string>().at(0));
    l.nonce = j.at("k");
    l.until = j.at("u");
    l.received_at = j.at("r");
    l.first_received_at = j.at("f");
    l.receives = j.at("n");
    l.reply = j.at("a");
    l.reason = j.value("why", "");
    l.group = j.value("g", "");
    l.pid = j.value("p", 0u);
    l.worker_since = j.value("ws", Millis{0});
    if (auto h = j.find("h"); h != j.end()) l.history = attempts_from(*h);
    l.holder = j.value("hd", "");
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Io, fmt::format("a lease record is damaged ({})", e.what()));
  }
  return l;
}

Message message_of(natsMsg* msg, std::uint64_t seq) {
  Message m;
  m.id = header(msg, "Q-Id");
  if (m.id.empty()) m.id = q::message_id(seq);
  m.body.assign(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
  try {
    if (auto a = header(msg, "Q-Attrs"); !a.empty())
      for (const auto& kv : json::parse(a)) m.attributes.emplace_back(kv.at(0), kv.at(1));
    if (auto d = header(msg, "Q-Dedup"); !d.empty()) m.dedup_id = json::parse(d);
    if (auto g = header(msg, "Q-Group"); !g.empty()) m.group = json::parse(g);
    if (auto r = header(msg, "Q-Reason"); !r.empty()) m.reason = json::parse(r);
    if (auto t = header(msg, "Q-Sent-At"); !t.empty()) m.sent_at = std::stoll(t);
    if (auto n = header(msg, "Q-Receives"); !n.empty()) m.receive_count = std::stoul(n);
    if (auto t = header(msg, "Q-Dead-At"); !t.empty()) {
      m.dead_at = std::stoll(t);
      m.state = MessageState::Dead;
    }
    m.attempts = attempts_from_header(header(msg, "Q-History"));
    if (auto t = header(msg, "Q-First-Received"); !t.empty() && t != "0")
      m.first_received_at = std::stoll(t);
    if (auto t = header(msg, "Q-Last-Received"); !t.empty() && t != "0")
      m.last_received_at = std::stoll(t);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::Io,
                fmt::format("message {}: its headers are damaged ({})", m.id, e.what()));
  }
  m.visible_at = m.sent_at;
  return m;
}

void copy_message_headers(natsMsg* from, natsMsg* to, const std::string& id) {
  natsMsgHeader_Set(to, "Q-Id", id.c_str());
  for (const char* key : {"Q-Sent-At", "Q-Dedup", "Q-Attrs", "Q-Group"})
    if (auto v = header(from, key); !v.empty()) natsMsgHeader_Set(to, key, v.c_str());
}

std::string header(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || !value) return {};
  return value;
}

std::string nak_body(Millis delay) {
  if (delay <= 0) return "-NAK";
  return fmt::format("-NAK {{\"delay\": {}}}", delay * kNs);
}

}  // namespace q::nats
