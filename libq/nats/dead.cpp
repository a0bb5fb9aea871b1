#include "libq/nats/dead.hpp"

#include "libq/nats/history.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/nats/groups.hpp"
#include "libq/nats/send.hpp"
#include "libq/nats/stage.hpp"
#include "libq/ids.hpp"
#include "libq/utf8.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;
constexpr jsErrCode kSequenceNotFound = static_cast<jsErrCode>(10057);
constexpr jsErrCode kDeleteFailed = static_cast<jsErrCode>(10043);  // "sequence N not found"

// The reason as the Q-Reason header carries it (ASCII JSON), cut to at most
// `budget` bytes: its start is kept, with a mark that it was cut.
std::string reason_within(const std::string& reason, std::size_t budget) {
  std::string out = json(reason).dump(-1, ' ', true);
  std::size_t keep = reason.size();
  while (out.size() > budget && keep > 0) {
    keep = std::min(keep - 1, keep * budget / out.size());
    out = json(std::string(utf8_prefix(reason, keep)) + " [cut]").dump(-1, ' ', true);
  }
  return out;
}

// The attempt history as the Q-History header carries it, within `budget`
// bytes: the texts of the attempts are cut first (stderr tails keep their
// end, the rest their start), then the oldest attempts go.
std::string history_within(std::vector<Attempt> attempts, std::size_t budget) {
  std::string out = attempts_header(attempts);
  for (std::size_t cap = 1024; out.size() > budget && cap >= 64; cap /= 2) {
    for (auto& a : attempts) {
      a.reason = std::string(utf8_prefix(a.reason, cap));
      a.command = std::string(utf8_prefix(a.command, cap));
      a.run.first_line = std::string(utf8_prefix(a.run.first_line, cap));
      a.run.stderr_tail = std::string(utf8_suffix(a.run.stderr_tail, cap));
    }
    out = attempts_header(attempts);
  }
  while (out.size() > budget && !attempts.empty()) {
    attempts.erase(attempts.begin());
    out = attempts_header(attempts);
  }
  return out;
}

}  // namespace

void DeadLetters::ensure_stream(const std::string& queue) {
  std::string name = names_.dead_stream(queue);
  std::string subj = names_.dead_subject(queue, "*");
  const char* subjects[] = {subj.c_str()};
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Retention = js_LimitsPolicy;
  cfg.Storage = js_FileStorage;
  cfg.Replicas = replicas_;
  cfg.MaxAge = kDeadLetterRetention * kNs;
  cfg.MaxMsgsPerSubject = 1;
  cfg.Duplicates = 2 * kMinute * kNs;
  jsErrCode code{};
  natsStatus s = client_.retry(
      "setting up the dead letters of queue " + queue,
      [&](jsErrCode* err) {
        jsStreamInfo* si = nullptr;
        natsStatus st = js_AddStream(&si, client_.js(), &cfg, nullptr, err);
        // Made before (by an earlier create cut short): the same settings.
        if (st != NATS_OK && !transient(st, *err))
          st = js_UpdateStream(&si, client_.js(), &cfg, nullptr, err);
        jsStreamInfo_Destroy(si);
        return st;
      },
      &code);
  if (s != NATS_OK) client_.fail("setting up the dead letters of queue " + queue, s, code);
}

std::uint64_t DeadLetters::delete_stream(const std::string& queue) {
  auto st = state(queue);
  if (!st) return 0;
  jsErrCode code{};
  natsStatus s = client_.retry(
      "deleting the dead letters of queue " + queue,
      [&](jsErrCode* err) {
        return js_DeleteStream(client_.js(), names_.dead_stream(queue).c_str(), nullptr, err);
      },
      &code);
  if (s != NATS_OK && code != kStreamNotFound)
    client_.fail("deleting the dead letters of queue " + queue, s, code);
  return st->Msgs;
}

void DeadLetters::finish(const std::string& queue, natsMsg* msg, std::uint64_t seq,
                         const Lease& dead, std::uint64_t revision, const std::string& reply) {
  std::string id = header(msg, "Q-Id");
  if (id.empty()) id = q::message_id(seq);
  std::string subj = names_.dead_subject(queue, id);
  natsMsg* raw = nullptr;
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), nullptr, natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  MsgPtr out(raw);
  if (s != NATS_OK) client_.fail("dead-lettering message " + id, s, {});
  copy_message_headers(msg, raw, id);
  // A FIFO message's place in its group's send order, for its redrive: the
  // sequence it was sent as (a redriven one's is its Q-Order).
  if (!header(msg, "Q-Group").empty()) {
    std::string order = header(msg, kOrderHeader);
    if (order.empty() || !Groups::redriven(natsMsg_GetSubject(msg))) order = std::to_string(seq);
    natsMsgHeader_Set(raw, kOrderHeader, order.c_str());
  }
  std::string msg_id = names_.stream(queue) + ":" + std::to_string(seq);
  natsMsgHeader_Set(raw, "Nats-Msg-Id", msg_id.c_str());
  // The reason and the history are bounded (kDeadLetterReserve, which every
  // max size leaves free): the copy of a message at its max size fits.
  natsMsgHeader_Set(raw, "Q-Reason", reason_within(dead.reason, kDeadLetterReserve / 2).c_str());
  natsMsgHeader_Set(raw, "Q-Receives", std::to_string(dead.receives).c_str());
  natsMsgHeader_Set(raw, "Q-Dead-At", std::to_string(dead.until).c_str());
  natsMsgHeader_Set(raw, "Q-First-Received", std::to_string(dead.first_received_at).c_str());
  natsMsgHeader_Set(raw, "Q-Last-Received", std::to_string(dead.received_at).c_str());
  // The attempt history follows the message (nats/history.hpp).
  if (auto h = history_within(dead.history, kDeadLetterReserve / 2); !h.empty())
    natsMsgHeader_Set(raw, "Q-History", h.c_str());
  jsErrCode code{};
  s = client_.retry(
      "dead-lettering message " + id,
      [&](jsErrCode* err) {
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, client_.js(), out.get(), nullptr, err);
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s == NATS_NO_RESPONDERS || code == kStreamNotFound) {
    // A queue made before dead-letter streams existed: make its stream now.
    ensure_stream(queue);
    s = client_.retry(
        "dead-lettering message " + id,
        [&](jsErrCode* err) {
          jsPubAck* pa = nullptr;
          natsStatus st = js_PublishMsg(&pa, client_.js(), out.get(), nullptr, err);
          jsPubAck_Destroy(pa);
          return st;
        },
        &code);
  }
  if (s != NATS_OK) client_.fail("dead-lettering message " + id, s, code);
  if (counters_)
    counters_->count(queue, counter::kDeadLettered, event_id("dl", names_.stream(queue), seq));
  // Now off the queue: +TERM tells the consumer to stop redelivering, the
  // delete (confirmed by the stream's leader) takes it out of the stream.
  if (!reply.empty()) {
    try {
      client_.request(reply, "+TERM");
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Busy) throw;
    }
  }
  s = client_.retry(
      "removing dead-lettered message " + id,
      [&](jsErrCode* err) {
        return js_DeleteMsg(client_.js(), names_.stream(queue).c_str(), seq, nullptr, err);
      },
      &code);
  if (s != NATS_OK && s != NATS_NOT_FOUND && code != kSequenceNotFound && code != kDeleteFailed)
    client_.fail("removing dead-lettered message " + id, s, code);
  kill_point("dead-removed");
  client_.remove(revision);
}

// A dead letter's place in its group's send order (Q-Order); 0: none.
std::uint64_t DeadLetters::order_of(natsMsg* msg) {
  std::string o = header(msg, kOrderHeader);
  if (o.empty() || o.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoull(o);
}

std::optional<jsStreamState> DeadLetters::state(const std::string& queue) {
  return client_.stream_state(names_.dead_stream(queue),
                              "reading the dead letters of queue " + queue);
}

std::uint64_t DeadLetters::count(const std::string& queue) {
  auto st = state(queue);
  return st ? st->Msgs : 0;
}

// Sequence by sequence from the first: the stream API of 2.9 reads one
// message by sequence or by subject; deleted ones (redriven) are gaps passed over.
void DeadLetters::each(const std::string& queue,
                       const std::function<bool(const Message&, std::uint64_t)>& each) {
  each_found(queue, [&](const Found& f) { return each(f.message, f.seq); });
}

void DeadLetters::each_found(const std::string& queue,
                             const std::function<bool(const Found&)>& each) {
  auto st = state(queue);
  if (!st || st->Msgs == 0) return;
  std::string stream = names_.dead_stream(queue);
  std::uint64_t seen = 0;
  for (std::uint64_t seq = st->FirstSeq; seq <= st->LastSeq && seen < st->Msgs; ++seq) {
    MsgPtr msg = client_.stored_message(stream, seq, "reading the dead letters of queue " + queue);
    if (!msg) continue;
    ++seen;
    if (!each(Found{message_of(msg.get(), 0), seq, order_of(msg.get())})) return;
  }
}

std::optional<DeadLetters::Found> DeadLetters::find(const std::string& queue,
                                                    const std::string& id) {
  natsMsg* raw = nullptr;
  jsErrCode code{};
  std::string subj = names_.dead_subject(queue, id);
  natsStatus s = client_.retry(
      "reading dead letter " + id,
      [&](jsErrCode* err) {
        natsMsg_Destroy(raw);
        raw = nullptr;
        return js_GetLastMsg(&raw, client_.js(), names_.dead_stream(queue).c_str(), subj.c_str(),
                             nullptr, err);
      },
      &code);
  MsgPtr msg(raw);
  if (s == NATS_NOT_FOUND || code == kNoMessageFound || code == kStreamNotFound)
    return std::nullopt;
  if (s != NATS_OK) client_.fail("reading dead letter " + id, s, code);
  return Found{message_of(msg.get(), 0), natsMsg_GetSequence(msg.get()), order_of(msg.get())};
}

std::uint64_t DeadLetters::purge(const std::string& queue) {
  auto st = state(queue);
  if (!st) return 0;
  jsErrCode code{};
  natsStatus s = client_.retry(
      "purging the dead letters of queue " + queue,
      [&](jsErrCode* err) {
        return js_PurgeStream(client_.js(), names_.dead_stream(queue).c_str(), nullptr, err);
      },
      &code);
  if (s != NATS_OK) client_.fail("purging the dead letters of queue " + queue, s, code);
  return st->Msgs;
}

void DeadLetters::redrive(const std::string& queue, const Found& found, const std::string& to,
                          const std::string& subj, bool fifo) {
  const Message& m = found.message;
  natsMsg* raw = nullptr;
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), nullptr, m.body.data(), static_cast<int>(m.body.size()));
  MsgPtr out(raw);
  if (s != NATS_OK) client_.fail("redriving dead letter " + m.id, s, {});
  natsMsgHeader_Set(raw, "Q-Id", m.id.c_str());
  natsMsgHeader_Set(raw, "Q-Sent-At", std::to_string(m.sent_at).c_str());
  if (!m.dedup_id.empty())
    natsMsgHeader_Set(raw, "Q-Dedup", json(m.dedup_id).dump(-1, ' ', true).c_str());
  if (!m.attributes.empty()) {
    json a = json::array();
    for (const auto& [k, v] : m.attributes) a.push_back({k, v});
    natsMsgHeader_Set(raw, "Q-Attrs", a.dump(-1, ' ', true).c_str());
  }
  if (auto h = attempts_header(m.attempts); !h.empty())
    natsMsgHeader_Set(raw, "Q-History", h.c_str());
  if (fifo) {
    natsMsgHeader_Set(raw, "Q-Group", json(m.group).dump(-1, ' ', true).c_str());
    if (Groups::redriven(subj))
      natsMsgHeader_Set(raw, kOrderHeader, std::to_string(found.order).c_str());
  }
  std::string msg_id = "r" + names_.dead_stream(queue) + ":" + std::to_string(found.seq);
  natsMsgHeader_Set(raw, "Nats-Msg-Id", msg_id.c_str());
  jsErrCode code{};
  std::string text;
  s = client_.retry(
      "redriving dead letter " + m.id,
      [&](jsErrCode* err) {
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, client_.js(), out.get(), nullptr, err);
        jsPubAck_Destroy(pa);
        if (st != NATS_OK && nats_GetLastError(nullptr)) text = nats_GetLastError(nullptr);
        return st;
      },
      &code);
  if (s != NATS_OK && code == static_cast<jsErrCode>(10077) &&
      text.find("maximum messages") != std::string::npos)
    throw Error(ErrorKind::Full,
                fmt::format("queue {}: full (max depth reached while redriving); dead letter {} "
                            "and those after it were not redriven",
                            to, m.id));
  if (s != NATS_OK) client_.fail("redriving dead letter " + m.id, s, code);
  if (counters_) {
    std::string dead = names_.dead_stream(queue);
    counters_->count(queue, counter::kRedriven, event_id("rd", dead, found.seq));
    counters_->count(to, counter::kArrived, event_id("ar", dead, found.seq));
  }
  remove(queue, found.seq);
}

bool DeadLetters::remove(const std::string& queue, std::uint64_t seq) {
  jsErrCode code{};
  natsStatus s = client_.retry(
      "removing a dead letter of queue " + queue,
      [&](jsErrCode* err) {
        return js_DeleteMsg(client_.js(), names_.dead_stream(queue).c_str(), seq, nullptr, err);
      },
      &code);
  if (s == NATS_NOT_FOUND || code == kSequenceNotFound || code == kNoMessageFound ||
      code == kDeleteFailed)
    return false;
  if (s != NATS_OK) client_.fail("removing a dead letter of queue " + queue, s, code);
  return true;
}

}  // namespace q::nats
