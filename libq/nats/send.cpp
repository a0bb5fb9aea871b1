#include "libq/nats/send.hpp"

#include <map>
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
  std::vector<Outgoing> out;
  out.reserve(messages.size());
  for (auto& m : messages) out.push_back(prepare(queue, config, m, out.size()));
  if (out.size() > 1) publish_async(queue, out);
  std::vector<SendResult> results;
  for (auto& o : out) {
    if (!o.done) publish_sync(queue, o, out.size() > 1);
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

Publisher::Outgoing Publisher::prepare(const std::string& queue, const QueueConfig& config,
                                       OutgoingMessage& m, std::size_t index) {
  Outgoing o;
  o.token = random_token();
  natsMsg* raw = nullptr;
  // A FIFO queue's message goes to its group's subject (nats/groups.hpp).
  std::string subj =
      m.group.empty() ? names_.subject(queue) : Groups(client_, names_).subject(queue, m.group);
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), nullptr, m.body.data(), static_cast<int>(m.body.size()));
  o.msg.reset(raw);
  if (s != NATS_OK) client_.fail("sending to queue " + queue, s, {});
  std::string msg_id;
  if (!m.dedup_id.empty() && config.dedup_window > 0) {
    msg_id = "d" + sha256_hex(m.dedup_id);
  } else {
    msg_id = own_id_prefix_.empty() ? "s" + o.token : own_id_prefix_ + std::to_string(index);
    o.own_id = true;
  }
  natsMsgHeader_Set(raw, "Nats-Msg-Id", msg_id.c_str());
  natsMsgHeader_Set(raw, "Q-Send", o.token.c_str());
  natsMsgHeader_Set(raw, "Q-Sent-At", std::to_string(clock_.now()).c_str());
  if (!m.dedup_id.empty())
    natsMsgHeader_Set(raw, "Q-Dedup", json(m.dedup_id).dump(-1, ' ', true).c_str());
  if (!m.attributes.empty())
    natsMsgHeader_Set(raw, "Q-Attrs", attributes_json(m.attributes).c_str());
  if (!m.group.empty())
    natsMsgHeader_Set(raw, "Q-Group", json(m.group).dump(-1, ' ', true).c_str());
  if (visible_at_ > 0)
    natsMsgHeader_Set(raw, kVisibleAtHeader, std::to_string(visible_at_).c_str());
  return o;
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

void Publisher::publish_sync(const std::string& queue, Outgoing& o, bool tried_before) {
  int attempts = 0;
  jsErrCode code{};
  std::string text;
  natsStatus s = client_.retry(
      "sending to queue " + queue,
      [&](jsErrCode* err) {
        ++attempts;
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, client_.js(), o.msg.get(), nullptr, err);
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
// (same Nats-Msg-Id, so a message stored twice is stored once).
void Publisher::publish_async(const std::string& queue, std::vector<Outgoing>& out) {
  std::mutex mu;
  std::map<std::string, std::size_t> by_token;
  for (std::size_t i = 0; i < out.size(); ++i) by_token[out[i].token] = i;
  client_.on_pub_ack = [&](natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = by_token.find(header(msg, "Q-Send"));
    if (it != by_token.end() && pa && !pae) {
      Outgoing& o = out[it->second];
      o.seq = pa->Sequence;
      o.duplicate = pa->Duplicate;
      o.done = true;
    }
    natsMsg_Destroy(msg);
  };
  for (auto& o : out) {
    // The library takes the message it publishes; keep a copy for a retry.
    natsMsg* copy = nullptr;
    natsStatus s = natsMsg_Create(&copy, natsMsg_GetSubject(o.msg.get()), nullptr,
                                  natsMsg_GetData(o.msg.get()), natsMsg_GetDataLength(o.msg.get()));
    for (const char* key :
         {"Nats-Msg-Id", "Q-Send", "Q-Sent-At", "Q-Dedup", "Q-Attrs", "Q-Group", kVisibleAtHeader})
      if (s == NATS_OK)
        if (auto v = header(o.msg.get(), key); !v.empty())
          s = natsMsgHeader_Set(copy, key, v.c_str());
    if (s == NATS_OK) s = js_PublishMsgAsync(client_.js(), &copy, nullptr);
    natsMsg_Destroy(copy);
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
