#include "libq/nats/send.hpp"

#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/nats/delay.hpp"
#include "libq/nats/groups.hpp"
#include "libq/ids.hpp"
#include "libq/sha256.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;
constexpr jsErrCode kStoreFailed = static_cast<jsErrCode>(10077);
}  // namespace

std::vector<SendResult> Publisher::publish(const std::string& queue, const QueueConfig& config,
                                           std::vector<OutgoingMessage>& messages) {
  token_ = random_token();
  subject_ = names_.subject(queue);
  sent_at_ = std::to_string(clock_.now());
  std::vector<Outgoing> out;
  out.reserve(messages.size());
  for (const auto& m : messages) out.push_back(prepare(config, m, out.size()));
  if (out.size() > 1) publish_async(queue, messages, out);
  std::vector<SendResult> results;
  results.reserve(out.size());
  for (auto& o : out) {
    if (!o.done) publish_sync(queue, messages[o.index], o, out.size() > 1);
    results.push_back({q::message_id(o.seq), o.duplicate});
  }
  return results;
}

std::string Publisher::attributes_json(const Attributes& attributes) {
  if (attributes.empty()) return {};
  json a = json::array();
  for (const auto& [k, v] : attributes) a.push_back({k, v});
  return a.dump(-1, ' ', true);  // ASCII only: a header value has no raw line breaks
}

Publisher::Outgoing Publisher::prepare(const QueueConfig& config, const OutgoingMessage& m,
                                       std::size_t index) {
  Outgoing o;
  o.index = index;
  // Unique to this send: the publish's random token, then the index.
  o.token = fmt::format("{}.{:x}", token_, index);
  if (!m.dedup_id.empty() && config.dedup_window > 0) {
    o.msg_id = "d" + sha256_hex(m.dedup_id);
  } else {
    o.msg_id = own_id_prefix_.empty() ? "s" + o.token : own_id_prefix_ + std::to_string(index);
    o.own_id = true;
  }
  return o;
}

MsgPtr Publisher::build(const std::string& queue, const OutgoingMessage& m, const Outgoing& o) {
  natsMsg* raw = nullptr;
  // A FIFO queue's message goes to its group's subject (nats/groups.hpp).
  std::string group_subject;
  if (!m.group.empty()) group_subject = Groups(client_, names_).subject(queue, m.group);
  const std::string& subj = m.group.empty() ? subject_ : group_subject;
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), nullptr, m.body.data(), static_cast<int>(m.body.size()));
  MsgPtr msg(raw);
  if (s == NATS_OK) s = natsMsgHeader_Set(raw, "Nats-Msg-Id", o.msg_id.c_str());
  // Q-Send identifies this send's message; a Nats-Msg-Id of "s" + the token
  // does already (index_of), so it is not repeated there: less for the
  // servers to parse, store and replicate per message.
  if (s == NATS_OK && o.msg_id.compare(1, std::string::npos, o.token) != 0)
    s = natsMsgHeader_Set(raw, "Q-Send", o.token.c_str());
  if (s == NATS_OK) s = natsMsgHeader_Set(raw, "Q-Sent-At", sent_at_.c_str());
  if (s == NATS_OK && !m.dedup_id.empty())
    s = natsMsgHeader_Set(raw, "Q-Dedup", json(m.dedup_id).dump(-1, ' ', true).c_str());
  if (s == NATS_OK && !m.attributes.empty())
    s = natsMsgHeader_Set(raw, "Q-Attrs", attributes_json(m.attributes).c_str());
  if (s == NATS_OK && !m.group.empty())
    s = natsMsgHeader_Set(raw, "Q-Group", json(m.group).dump(-1, ' ', true).c_str());
  if (s == NATS_OK && visible_at_ > 0)
    s = natsMsgHeader_Set(raw, kVisibleAtHeader, std::to_string(visible_at_).c_str());
  if (s != NATS_OK) client_.fail("sending to queue " + queue, s, {});
  return msg;
}

std::size_t Publisher::index_of(natsMsg* msg) const {
  const char* v = nullptr;
  std::string_view token;
  if (natsMsgHeader_Get(msg, "Q-Send", &v) == NATS_OK && v) {
    token = v;
  } else if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &v) == NATS_OK && v && v[0] == 's') {
    token = std::string_view(v + 1);
  }
  if (token.size() <= token_.size() + 1 || token.compare(0, token_.size(), token_) != 0 ||
      token[token_.size()] != '.')
    return std::string::npos;
  std::size_t index = 0;
  for (char c : token.substr(token_.size() + 1)) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::string::npos;
    index = index * 16 + static_cast<std::size_t>(d);
  }
  return index;
}

void Publisher::publish_failed(const std::string& queue, natsStatus s, jsErrCode code,
                               const std::string& text) {
  if (code == kStoreFailed && text.find("maximum messages") != std::string::npos)
    throw Error(ErrorKind::Full,
                fmt::format("queue {}: full (max depth reached while sending); the messages "
                            "before it were sent",
                            queue));
  client_.fail("sending to queue " + queue, s, code);
}

// A duplicate answer to a retried publish may be this very send, stored by
// the attempt whose answer was lost: then it is no duplicate.
void Publisher::settle_duplicate(const std::string& queue, Outgoing& o, bool retried) {
  if (!o.duplicate) return;
  if (o.own_id) {
    o.duplicate = false;
    return;
  }
  if (!retried) return;
  // Unreadable (but not a cluster that stopped answering), the message stays
  // a duplicate: it is stored once either way.
  try {
    MsgPtr stored =
        client_.stored_message(names_.stream(queue), o.seq, "sending to queue " + queue);
    if (stored && header(stored.get(), "Q-Send") == o.token) o.duplicate = false;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Busy) throw;
  }
}

void Publisher::publish_sync(const std::string& queue, const OutgoingMessage& m, Outgoing& o,
                             bool tried_before) {
  MsgPtr msg = build(queue, m, o);
  int attempts = 0;
  jsErrCode code{};
  std::string text;
  natsStatus s = client_.retry(
      "sending to queue " + queue,
      [&](jsErrCode* err) {
        ++attempts;
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, client_.js(), msg.get(), nullptr, err);
        if (st == NATS_OK) {
          o.seq = pa->Sequence;
          o.duplicate = pa->Duplicate;
        } else {
          text = nats_GetLastError(nullptr);
        }
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s != NATS_OK) publish_failed(queue, s, code, text);
  o.done = true;
  settle_duplicate(queue, o, attempts > 1 || tried_before);
}

// Many messages: published without waiting for each answer (up to 4096
// outstanding); any without a good answer then goes again one by one
// (same Nats-Msg-Id, so a message stored twice is stored once). Each
// message is built once and handed to the library, which gives it back with
// its answer; a retry builds it again.
void Publisher::publish_async(const std::string& queue,
                              const std::vector<OutgoingMessage>& messages,
                              std::vector<Outgoing>& out) {
  std::mutex mu;
  client_.on_pub_ack = [&](natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae) {
    std::size_t i = index_of(msg);
    natsMsg_Destroy(msg);
    std::lock_guard<std::mutex> lock(mu);
    if (i < out.size() && pa && !pae) {
      Outgoing& o = out[i];
      o.seq = pa->Sequence;
      o.duplicate = pa->Duplicate;
      o.done = true;
    }
  };
  for (auto& o : out) {
    natsMsg* msg = build(queue, messages[o.index], o).release();
    // With 4096 unanswered, nats.c waits for answers up to its stall wait
    // (200 ms) and then gives up with NATS_TIMEOUT. On a busy machine the
    // servers take that long now and then, and every message after it went
    // one by one (a 20,000-line send took 13 s instead of 1.3): wait again
    // while the window may still drain.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    natsStatus s;
    while ((s = js_PublishMsgAsync(client_.js(), &msg, nullptr)) == NATS_TIMEOUT &&
           std::chrono::steady_clock::now() < give_up) {
    }
    natsMsg_Destroy(msg);     // left to us only when it was not taken
    if (s != NATS_OK) break;  // the rest go one by one
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 10 * kSecond;
  js_PublishAsyncComplete(client_.js(), &po);
  client_.on_pub_ack = nullptr;
  for (auto& o : out) {
    std::lock_guard<std::mutex> lock(mu);
    if (o.done) settle_duplicate(queue, o, false);
  }
}

}  // namespace q::nats
