#include "libq/nats/groups.hpp"
#include "libq/base64.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/sha256.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;

// The value of header `key` in a NATS header block ("NATS/1.0\r\nKey: value\r\n...").
std::string header_value(const std::string& block, std::string_view key) {
  std::size_t at = 0;
  while ((at = block.find("\r\n", at)) != std::string::npos) {
    at += 2;
    if (block.compare(at, key.size(), key) == 0 && block.compare(at + key.size(), 1, ":") == 0) {
      std::size_t from = at + key.size() + 1;
      std::size_t end = block.find("\r\n", from);
      std::string v = block.substr(from, end == std::string::npos ? end : end - from);
      v.erase(0, v.find_first_not_of(' '));
      return v;
    }
  }
  return {};
}

// A message of the group as a head candidate: the first on one of its subjects.
struct Candidate {
  std::uint64_t seq;
  std::uint64_t order;
  std::string subject;
  Millis until = 0;     // of its lease; 0: none
  bool leased = false;  // a lease in force: the group is held by it
};
}  // namespace

std::string group_token(const std::string& group) { return sha256_hex(group).substr(0, 16); }

bool Groups::redriven(const std::string& subject) {
  auto dot = subject.rfind('.');
  return dot != std::string::npos && dot >= 2 && subject.compare(dot - 2, 2, ".r") == 0;
}

std::string Groups::again_of(const std::string& group) {
  std::string r = group;
  r[r.rfind('.') - 1] = 'r';
  return r;
}

std::string Groups::group_of(const std::string& subject) {
  if (!redriven(subject)) return subject;
  std::string g = subject;
  g[g.rfind('.') - 1] = 'g';
  return g;
}

std::optional<Groups::First> Groups::first_on(const std::string& queue, const std::string& subject,
                                              std::uint64_t from) {
  auto m = client_.next_by_subject(names_.stream(queue), from, subject,
                                   "reading the head of a message group of queue " + queue);
  if (!m) return std::nullopt;
  First f{m->at("seq").get<std::uint64_t>(), 0};
  f.order = f.seq;
  // A redriven message's place is its Q-Order header (the sequence it was
  // sent as); the header block comes base64-encoded.
  if (redriven(m->value("subject", ""))) {
    std::string o = header_value(q::unbase64(m->value("hdrs", "")).value_or(""), kOrderHeader);
    if (!o.empty() && o.find_first_not_of("0123456789") == std::string::npos)
      f.order = std::stoull(o);
  }
  return f;
}

std::optional<Groups::Head> Groups::head(const std::string& queue, const std::string& group,
                                         Millis now, Seen* seen) {
  auto first_live = [&](const std::string& subject) -> std::optional<Candidate> {
    std::uint64_t from = 1;
    for (;;) {
      auto f = first_on(queue, subject, from);
      if (!f) return std::nullopt;
      Candidate c{f->seq, f->order, subject};
      if (auto lease = client_.get(Names::lease_key(queue, f->seq))) {
        Lease l = Lease::decode(lease->value);
        if (l.state == Lease::Acked || l.state == Lease::Dead) {
          // Leaving: the group goes on without it.
          if (seen) seen->decided.push_back(f->seq);
          from = f->seq + 1;
          continue;
        }
        c.until = l.until;
        c.leased = l.state == Lease::Leased && l.until > now;
      }
      return c;
    }
  };
  auto sent = first_live(group);
  // Most groups never had a message redriven: one request finds none.
  auto again = first_live(again_of(group));
  if (seen) {
    if (sent) seen->sent_first = sent->seq;
    if (again) seen->again_first = again->seq;
  }
  if (!sent && !again) return std::nullopt;
  const Candidate* h = sent ? &*sent : &*again;
  const Candidate* other = nullptr;
  if (sent && again) {
    h = again->order < sent->order ? &*again : &*sent;
    other = h == &*sent ? &*again : &*sent;
  }
  Head out{h->seq, h->until, 0};
  if (other && other->leased) out.held_until = other->until;
  return out;
}

bool Groups::admit(const std::string& queue, const std::string& subject, std::uint64_t seq,
                   const std::string& reply, Millis now, Millis ack_wait) {
  Seen seen;
  auto h = head(queue, group_of(subject), now, &seen);
  // Acked or dead-lettered by one who did not finish: the lease rules do it.
  if (std::find(seen.decided.begin(), seen.decided.end(), seq) != seen.decided.end()) return true;
  if (h && h->seq == seq && h->held_until == 0) return true;
  // Gone from the stream (acked while this delivery was on its way): its
  // subject's first message still there is past it, or there is none.
  auto first = redriven(subject) ? seen.again_first : seen.sent_first;
  if (!first || *first > seq) return false;
  pass(queue, subject, seq, reply, now, ack_wait);
  return false;
}

bool Groups::alone(const std::string& queue, const std::string& subject, std::uint64_t seq,
                   Millis now) {
  std::string group = group_of(subject);
  // The common case: a sent message, and its group has no redriven one.
  if (!redriven(subject)) {
    if (!first_on(queue, again_of(group), 1)) return true;
  }
  auto h = head(queue, group, now);
  return h && h->seq == seq && h->held_until == 0;
}

void Groups::pass(const std::string& queue, const std::string& subject, std::uint64_t seq,
                  const std::string& reply, Millis now, Millis ack_wait) {
  std::string group = group_of(subject);
  auto h = head(queue, group, now);
  auto nak = [&](Millis delay) {
    try {
      client_.request(reply, nak_body(delay));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Busy) throw;
    }
  };
  // Back when the group is free at the latest (a safety net: the group's
  // next change wakes this delivery through the wait record). The delayed
  // NAK goes first: it would take the delivery off JetStream's redelivery
  // queue again.
  Millis free_at = h ? std::max(h->until, h->held_until) : 0;
  nak(std::max(free_at - now, ack_wait));
  wait(queue, seq, reply);
  // The group may have moved on before the wait record was there to wake
  // this delivery: then it is the free head now, and goes back at once.
  if (auto again = head(queue, group, now); again && again->seq == seq && again->held_until == 0)
    nak(0);
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

void Groups::wake(const std::string& queue, const std::string& group, Millis now) {
  try {
    auto h = head(queue, group_of(group), now);
    if (!h || h->held_until != 0) return;
    auto w = client_.get(wait_prefix(queue) + std::to_string(h->seq));
    if (!w) return;
    client_.request(w->value, "-NAK");
    client_.remove(w->revision);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Busy) throw;
  }
}

std::uint64_t Groups::count(const std::string& queue, std::uint64_t num_subjects) {
  if (num_subjects == 0) return 0;
  // The redriven subjects (few: dead letters sent back): a group with both
  // kinds of message is one group.
  std::string filter = names_.subject(queue) + ".r.*";
  std::vector<std::string> again;
  jsErrCode code{};
  std::string what = "counting the message groups of queue " + queue;
  natsStatus s = client_.retry(
      what,
      [&](jsErrCode* err) {
        again.clear();
        jsOptions o;
        jsOptions_Init(&o);
        o.Stream.Info.SubjectsFilter = filter.c_str();
        jsStreamInfo* si = nullptr;
        natsStatus st = js_GetStreamInfo(&si, client_.js(), names_.stream(queue).c_str(), &o, err);
        StreamInfoPtr hold(si);
        if (st == NATS_OK && si->State.Subjects)
          for (int i = 0; i < si->State.Subjects->Count; ++i)
            again.emplace_back(si->State.Subjects->List[i].Subject);
        return st;
      },
      &code);
  if (s != NATS_OK) client_.fail(what, s, code);
  std::uint64_t twice = 0;
  for (const auto& subject : again)
    if (first_on(queue, group_of(subject), 1)) ++twice;
  return num_subjects - std::min(num_subjects, twice);
}

void Groups::ensure_filters(const std::string& queue) {
  std::string what = "setting up the stream of queue " + queue + " for redriven messages";
  auto want = filters(queue);
  jsErrCode code{};
  natsStatus s = client_.retry(
      what,
      [&](jsErrCode* err) {
        jsStreamInfo* si = nullptr;
        natsStatus st =
            js_GetStreamInfo(&si, client_.js(), names_.stream(queue).c_str(), nullptr, err);
        StreamInfoPtr hold(si);
        if (st != NATS_OK) return st;
        jsStreamConfig* cfg = si->Config;
        std::vector<const char*> subjects(cfg->Subjects, cfg->Subjects + cfg->SubjectsLen);
        bool missing = false;
        for (const auto& f : want)
          if (std::none_of(subjects.begin(), subjects.end(),
                           [&](const char* have) { return f == have; })) {
            subjects.push_back(f.c_str());
            missing = true;
          }
        if (!missing) return NATS_OK;
        const char** was = cfg->Subjects;
        int was_len = cfg->SubjectsLen;
        cfg->Subjects = subjects.data();
        cfg->SubjectsLen = static_cast<int>(subjects.size());
        jsStreamInfo* updated = nullptr;
        st = js_UpdateStream(&updated, client_.js(), cfg, nullptr, err);
        jsStreamInfo_Destroy(updated);
        cfg->Subjects = was;  // owned by `si`
        cfg->SubjectsLen = was_len;
        return st;
      },
      &code);
  if (s != NATS_OK) client_.fail(what, s, code);
}

}  // namespace q::nats
