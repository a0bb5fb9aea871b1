#include "libq/nats/counters.hpp"
#include "libq/nats/pipeline.hpp"
#include "libq/base64.hpp"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace q::nats {

using json = nlohmann::json;

namespace {

// A subject with more events than this is rolled up by the next reader.
constexpr std::uint64_t kRollUpAfter = 1000;
// How long a repeated event id is recognised (the stream's dedup window):
// retries and redos come within seconds; this is the margin.
constexpr Millis kEventWindow = 20 * kMinute;

const char* const kAll[] = {counter::kReceived,     counter::kAcked,    counter::kNacked,
                            counter::kDeadLettered, counter::kRedriven, counter::kDeduplicated,
                            counter::kStaleAcks,    counter::kArrived};

}  // namespace

void Counters::ensure_stream() {
  std::string name = stream();
  std::string subjects = "qc." + names_.ns + ".>";
  const char* subject_list[] = {subjects.c_str()};
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  cfg.Subjects = subject_list;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  cfg.Replicas = replicas_;
  cfg.AllowRollup = true;
  cfg.Duplicates = kEventWindow * kNs;
  jsErrCode code{};
  natsStatus s = client_.retry(
      "creating the counters stream " + name,
      [&](jsErrCode* err) {
        jsStreamInfo* si = nullptr;
        natsStatus st = js_AddStream(&si, client_.js(), &cfg, nullptr, err);
        jsStreamInfo_Destroy(si);
        // 10058: a stream of that name exists (made by another q meanwhile).
        if (st != NATS_OK && *err == static_cast<jsErrCode>(10058)) return NATS_OK;
        return st;
      },
      &code);
  if (s != NATS_OK) client_.fail("creating the counters stream " + name, s, code);
}

void Counters::count(const std::string& queue, const char* counter, const std::string& id) {
  std::string subj = subject(queue, counter);
  natsMsg* raw = nullptr;
  natsStatus s = natsMsg_Create(&raw, subj.c_str(), nullptr, nullptr, 0);
  MsgPtr msg(raw);
  if (s != NATS_OK) client_.fail("counting " + std::string(counter), s, {});
  natsMsgHeader_Set(raw, "Nats-Msg-Id", id.c_str());
  std::uint64_t seq = 0;
  auto publish = [&](jsErrCode* err) {
    jsPubAck* pa = nullptr;
    natsStatus st = js_PublishMsg(&pa, client_.js(), msg.get(), nullptr, err);
    if (st == NATS_OK) seq = pa->Sequence;
    jsPubAck_Destroy(pa);
    return st;
  };
  std::string what = fmt::format("counting {} of queue {}", counter, queue);
  try {
    jsErrCode code{};
    s = client_.retry(what, publish, &code);
    if (s == NATS_NO_RESPONDERS || code == kStreamNotFound) {
      // The first count of the namespace (or of queues made before counters).
      ensure_stream();
      s = client_.retry(what, publish, &code);
    }
    if (s != NATS_OK) client_.fail(what, s, code);
  } catch (const Error& e) {
    // The operation it counts is decided; only the count is lost.
    if (e.kind() != ErrorKind::Busy) throw;
    return;
  }
  if (seq % kRollUpAfter == 0) roll_up(queue, counter);
}

void Counters::count_together(const std::string& queue, const std::vector<Event>& events) {
  if (events.size() == 1) return count(queue, events[0].counter, events[0].id);
  std::vector<Request> requests;
  for (const auto& e : events)
    requests.push_back({subject(queue, e.counter), std::string(), {{"Nats-Msg-Id", e.id}}});
  auto answers = request_together(client_, requests);
  for (std::size_t i = 0; i < events.size(); ++i) {
    ApiAnswer a = api_answer(answers[i].get());
    auto seq = a.body.find("seq");
    if (!a.clean || a.code != 0 || seq == a.body.end() || !seq->is_number_unsigned()) {
      // No stream yet, no answer, an error: count() retries and names it.
      count(queue, events[i].counter, events[i].id);
      continue;
    }
    // A repeated id is answered with the first one's sequence: rolled up then.
    if (a.body.value("duplicate", false)) continue;
    if (seq->get<std::uint64_t>() % kRollUpAfter == 0) roll_up(queue, events[i].counter);
  }
}

Counters::Base Counters::first_of(const std::string& subj) {
  Base base;
  auto m = client_.next_by_subject(stream(), 1, subj, "reading the counter " + subj, true);
  if (!m) return base;
  base.seq = m->at("seq").get<std::uint64_t>();
  std::string data = q::unbase64(m->value("data", std::string())).value_or("");
  base.total = data.empty() ? 1 : std::stoull(data);
  return base;
}

std::uint64_t Counters::last_seq_of(const std::string& subj) {
  natsMsg* raw = nullptr;
  jsErrCode code{};
  std::string name = stream();
  natsStatus s = client_.retry(
      "reading the counter " + subj,
      [&](jsErrCode* err) {
        natsMsg_Destroy(raw);
        raw = nullptr;
        return js_GetLastMsg(&raw, client_.js(), name.c_str(), subj.c_str(), nullptr, err);
      },
      &code);
  MsgPtr msg(raw);
  if (s == NATS_NOT_FOUND || code == kNoMessageFound || code == kStreamNotFound) return 0;
  if (s != NATS_OK) client_.fail("reading the counter " + subj, s, code);
  return natsMsg_GetSequence(msg.get());
}

std::vector<std::pair<std::string, std::uint64_t>> Counters::subject_counts(
    const std::string& filter) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Info.SubjectsFilter = filter.c_str();
  std::string name = stream();
  jsErrCode code{};
  natsStatus s = client_.retry(
      "reading the counters of " + filter,
      [&](jsErrCode* err) {
        out.clear();
        jsStreamInfo* si = nullptr;
        natsStatus st = js_GetStreamInfo(&si, client_.js(), name.c_str(), &jo, err);
        if (st == NATS_OK && si->State.Subjects)
          for (int i = 0; i < si->State.Subjects->Count; ++i)
            out.emplace_back(si->State.Subjects->List[i].Subject, si->State.Subjects->List[i].Msgs);
        jsStreamInfo_Destroy(si);
        return st;
      },
      &code);
  if (s == NATS_NOT_FOUND || code == kStreamNotFound) return {};
  if (s != NATS_OK) client_.fail("reading the counters of " + filter, s, code);
  return out;
}

std::uint64_t Counters::total(const std::string&, std::uint64_t msgs, const Base& base) const {
  if (base.seq == 0 || msgs == 0) return 0;
  return base.total + (msgs - 1);
}

QueueCounters Counters::read(const std::string& queue, std::uint64_t last_seq) {
  // A counter is base + the events after it. A roll-up between reading the
  // base and the counts would mix two epochs: the base is read before and
  // after the counts, and the whole read repeats when it moved.
  for (int attempt = 0;; ++attempt) {
    std::map<std::string, Base> before;
    for (const char* c : kAll) before[c] = first_of(subject(queue, c));
    auto counts = subject_counts(subject(queue, "*"));
    bool moved = false;
    std::map<std::string, std::uint64_t> totals;
    for (const auto& [subj, msgs] : counts) {
      std::string c = subj.substr(subj.rfind('.') + 1);
      auto b = before.find(c);
      if (b == before.end()) continue;
      Base after = first_of(subj);
      if (after.seq != b->second.seq) moved = true;
      totals[c] = total(subj, msgs, b->second);
      if (msgs > kRollUpAfter && attempt == 0) {
        try {
          roll_up(queue, b->first.c_str());
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Busy) throw;
        }
      }
    }
    if (moved && attempt < 5) continue;
    QueueCounters out;
    out.received = totals[counter::kReceived];
    out.acked = totals[counter::kAcked];
    out.nacked = totals[counter::kNacked];
    out.dead_lettered = totals[counter::kDeadLettered];
    out.redriven = totals[counter::kRedriven];
    out.deduplicated = totals[counter::kDeduplicated];
    out.stale_acks = totals[counter::kStaleAcks];
    std::uint64_t arrived = totals[counter::kArrived];
    out.sent = last_seq > arrived ? last_seq - arrived : 0;
    return out;
  }
}

void Counters::roll_up(const std::string& queue, const char* counter) {
  std::string subj = subject(queue, counter);
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::uint64_t last = last_seq_of(subj);
    Base base = first_of(subj);
    std::uint64_t msgs = 0;
    for (const auto& [s, n] : subject_counts(subj))
      if (s == subj) msgs = n;
    // The count belongs to the last sequence read only when no event came
    // and no roll-up ran between: look again.
    if (last == 0 || last_seq_of(subj) != last || first_of(subj).seq != base.seq) continue;
    if (msgs <= 1) return;
    std::string value = std::to_string(total(subj, msgs, base));
    natsMsg* raw = nullptr;
    natsStatus s =
        natsMsg_Create(&raw, subj.c_str(), nullptr, value.data(), static_cast<int>(value.size()));
    MsgPtr msg(raw);
    if (s != NATS_OK) client_.fail("rolling up " + subj, s, {});
    natsMsgHeader_Set(raw, "Nats-Rollup", "sub");
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.ExpectLastSubjectSeq = last;  // an event meanwhile: start again
    jsErrCode code{};
    s = client_.retry(
        "rolling up " + subj,
        [&](jsErrCode* err) {
          jsPubAck* pa = nullptr;
          natsStatus st = js_PublishMsg(&pa, client_.js(), msg.get(), &po, err);
          jsPubAck_Destroy(pa);
          return st;
        },
        &code);
    if (s == NATS_OK) return;
    // Lost the race to an event or another roll-up (or our own retried
    // publish had landed): read again.
    if (code == kWrongLastSequence) continue;
    client_.fail("rolling up " + subj, s, code);
  }
}

void Counters::remove(const std::string& queue) {
  std::string filter = "qc." + names_.ns + "." + encode_name(queue) + ".*";
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Purge.Subject = filter.c_str();
  std::string name = stream();
  jsErrCode code{};
  natsStatus s = client_.retry(
      "removing the counters of queue " + queue,
      [&](jsErrCode* err) { return js_PurgeStream(client_.js(), name.c_str(), &jo, err); }, &code);
  if (s == NATS_NOT_FOUND || code == kStreamNotFound) return;
  if (s != NATS_OK) client_.fail("removing the counters of queue " + queue, s, code);
}

}  // namespace q::nats
