#include "nats_groups.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sha256.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;
constexpr int kNoMessageFound = 10037;
}  // namespace

std::string group_token(const std::string& group) { return sha256_hex(group).substr(0, 16); }

std::optional<std::uint64_t> Groups::first_on(const std::string& queue, const std::string& subject,
                                              std::uint64_t from) {
  // STREAM.MSG.GET with next_by_subj (JSApiMsgGetRequest.NextFor in 2.9):
  // answered by the stream's leader, so it sees every ack that was confirmed.
  std::string api = "$JS.API.STREAM.MSG.GET." + names_.stream(queue);
  std::string body =
      json{{"seq", std::max<std::uint64_t>(from, 1)}, {"next_by_subj", subject}}.dump();
  std::optional<std::uint64_t> found;
  std::string what = "reading the head of a message group of queue " + queue;
  jsErrCode code{};
  natsStatus s = client_.retry(
      what,
      [&](jsErrCode* err) {
        natsMsg* raw = nullptr;
        natsStatus st = natsConnection_Request(&raw, client_.nc(), api.c_str(), body.data(),
                                               static_cast<int>(body.size()), 2000);
        MsgPtr reply(raw);
        if (st != NATS_OK) return st;
        json j = json::parse(natsMsg_GetData(reply.get()),
                             natsMsg_GetData(reply.get()) + natsMsg_GetDataLength(reply.get()),
                             nullptr, false);
        if (j.is_discarded()) return NATS_PROTOCOL_ERROR;
        if (auto e = j.find("error"); e != j.end()) {
          int ec = e->value("err_code", 0);
          if (ec == kNoMessageFound) {
            found.reset();
            return NATS_OK;
          }
          *err = static_cast<jsErrCode>(ec);
          return NATS_ERR;
        }
        found = j.at("message").at("seq").get<std::uint64_t>();
        return NATS_OK;
      },
      &code);
  if (s != NATS_OK) client_.fail(what, s, code);
  return found;
}

std::optional<Groups::Head> Groups::head(const std::string& queue, const std::string& subject) {
  std::uint64_t from = 1;
  for (;;) {
    auto seq = first_on(queue, subject, from);
    if (!seq) return std::nullopt;
    auto lease = client_.get(Names::lease_key(queue, *seq));
    if (!lease) return Head{*seq, 0};
    Lease l = Lease::decode(lease->value);
    if (l.state != Lease::Acked) return Head{*seq, l.until};
    from = *seq + 1;
  }
}

bool Groups::admit(const std::string& queue, const std::string& subject, std::uint64_t seq,
                   const std::string& reply, Millis now, Millis ack_wait) {
  auto h = head(queue, subject);
  if (!h || h->seq > seq) return false;  // gone from the stream: acked meanwhile
  if (h->seq == seq) return true;
  auto nak = [&](Millis delay) {
    try {
      client_.request(reply, nak_body(delay));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Busy) throw;
    }
  };
  // Back when the head's lease ends at the latest (a safety net: its ack
  // wakes this delivery through the wait record). The delayed NAK goes first:
  // it would take the delivery off JetStream's redelivery queue again.
  nak(std::max(h->until - now, ack_wait));
  wait(queue, seq, reply);
  // The head may have been acked before the wait record was there to wake
  // this delivery: then it is the head now, and goes back at once.
  if (auto again = head(queue, subject); again && again->seq == seq) nak(0);
  return false;
}

void Groups::wait(const std::string& queue, std::uint64_t seq, const std::string& reply) {
  // The newest delivery's ack subject, whatever was there: a plain publish
  // (the bucket keeps one record per key).
  std::string subj =
      "$KV." + client_.bucket_stream().substr(3) + "." + wait_prefix(queue) + std::to_string(seq);
  client_.retry("remembering a waiting message of queue " + queue, [&](jsErrCode* err) {
    jsPubAck* pa = nullptr;
    natsStatus st = js_Publish(&pa, client_.js(), subj.c_str(), reply.data(),
                               static_cast<int>(reply.size()), nullptr, err);
    jsPubAck_Destroy(pa);
    return st;
  });
  // A failure only costs latency: the delivery's own delay brings it back.
}

void Groups::wake_next(const std::string& queue, const std::string& subject, std::uint64_t seq) {
  try {
    auto next = first_on(queue, subject, seq + 1);
    if (!next) return;
    auto w = client_.get(wait_prefix(queue) + std::to_string(*next));
    if (!w) return;
    client_.request(w->value, "-NAK");
    client_.remove(w->revision);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Busy) throw;
  }
}

}  // namespace q::nats
