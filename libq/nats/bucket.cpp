// Client: the namespace's bucket of q's own records (get, compare-and-set,
// list, remove, purge) and the cluster's clock.
#include "libq/nats/client.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "libq/nats/stage.hpp"
#include "libq/timefmt.hpp"

namespace q::nats {

void Client::open_bucket(const std::string& bucket, int replicas) {
  bucket_ = bucket;
  bucket_stream_ = "KV_" + bucket;
  bucket_replicas_ = replicas;
  bucket_known_ = false;
}

// Before issue 24 every command looked the bucket up when it connected (one
// stream info, a round trip); now only what needs it does, and get_dated
// learns that the bucket is there from its own answer.
void Client::ensure_bucket() {
  if (bucket_known_) return;
  const std::string& bucket = bucket_;
  const int replicas = bucket_replicas_;
  jsErrCode code{};
  natsStatus s = retry(
      "reading the bucket " + bucket,
      [&](jsErrCode* err) {
        jsStreamInfo* si = nullptr;
        natsStatus st = js_GetStreamInfo(&si, js_, bucket_stream_.c_str(), nullptr, err);
        jsStreamInfo_Destroy(si);
        return st;
      },
      &code);
  if (s == NATS_NOT_FOUND || code == kStreamNotFound) {
    // Shaped like a KV bucket of history 1 (readable with `nats kv`), but
    // without deny_delete: a record q is done with is removed outright,
    // leaving no delete marker behind.
    std::string subjects = "$KV." + bucket + ".>";
    const char* subject_list[] = {subjects.c_str()};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = bucket_stream_.c_str();
    cfg.Subjects = subject_list;
    cfg.SubjectsLen = 1;
    cfg.MaxMsgsPerSubject = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = replicas;
    cfg.AllowRollup = true;
    cfg.AllowDirect = false;
    cfg.Discard = js_DiscardNew;
    s = retry(
        "creating the bucket " + bucket,
        [&](jsErrCode* err) {
          jsStreamInfo* si = nullptr;
          natsStatus st = js_AddStream(&si, js_, &cfg, nullptr, err);
          jsStreamInfo_Destroy(si);
          return st;
        },
        &code);
  }
  if (s != NATS_OK) fail("opening the bucket " + bucket, s, code);
  bucket_known_ = true;
}

std::optional<Record> Client::get(const std::string& key) {
  auto dated = get_dated(key);
  if (!dated) return std::nullopt;
  return std::move(dated->record);
}

std::optional<Client::Dated> Client::get_dated(const std::string& key) {
  natsMsg* raw = nullptr;
  jsErrCode code{};
  std::string subj = subject(key);
  natsStatus s = retry(
      "reading " + key,
      [&](jsErrCode* err) {
        natsMsg_Destroy(raw);
        raw = nullptr;
        return js_GetLastMsg(&raw, js_, bucket_stream_.c_str(), subj.c_str(), nullptr, err);
      },
      &code);
  MsgPtr msg(raw);
  // No bucket stream (a namespace never used) before it was looked up: look
  // it up as open_bucket did before (made when missing) and read again, so
  // every answer is the one a lookup first would have given.
  if (!bucket_known_ && s != NATS_OK && code == kStreamNotFound) {
    ensure_bucket();
    return get_dated(key);
  }
  if (s == NATS_NOT_FOUND || code == kNoMessageFound) {
    bucket_known_ = true;
    return std::nullopt;
  }
  if (s != NATS_OK) fail("reading " + key, s, code);
  bucket_known_ = true;
  return Dated{Record{std::string(natsMsg_GetData(msg.get()),
                                  static_cast<std::size_t>(natsMsg_GetDataLength(msg.get()))),
                      natsMsg_GetSequence(msg.get())},
               static_cast<Millis>(natsMsg_GetTime(msg.get()) / 1000000)};
}

// nats-server 2.9.10 checks a clustered stream's expected last subject
// sequence only before proposing a write, against what it has applied
// (stream.go: at apply only when not clustered or when the expected sequence
// is 0; nats-server #4320). Two writers expecting the same revision can both
// be stored: two leases for one delivery, an ack and a redelivery both
// accepted (seen in test_nats_storm, the FIFO storm and a shared rate).
// "No record yet" (expected 0) is checked at apply, so it is exact. A write
// over revision R therefore first creates the record `cas.R` (revisions are
// unique in the bucket, so R names it alone): one writer wins that create,
// only the winner writes, and removes its claim after. A later writer that
// read R cannot slip in once the winner's write is acknowledged (the leader
// has applied it, and its pre-check sees the new revision).
//
// A claim left by a process that died between its claim and its write would
// block the record for good, so a claim older than kStaleClaim is removed by
// the next writer, who then reads again. Its age is the cluster's: the
// claim's own timestamp (the leader stamps every stored message) against a
// probe record written now, never a client's wall clock (a client 30 s ahead
// judged live claims dead and two writers won: issue 25). A live claim lasts
// one round trip; a writer that meets one waits (up to the timeout) for it to
// clear or to go stale, watching the same claim record; only its own
// steady clock measures how long to wait, and only between the cluster's
// readings.
std::string Client::new_claim_value() const {
  static const std::string who = [] {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    return fmt::format("\"p\":{},\"h\":\"{}\"", static_cast<long>(getpid()), host);
  }();
  return fmt::format("{{{},\"w\":\"{}\"}}", who, random_token());
}

std::optional<std::uint64_t> Client::put_if(const std::string& key, const std::string& value,
                                            std::uint64_t expected, OnClaim on_claim) {
  if (expected == 0) return publish_if(key, value, 0);
  std::string claim_key = fmt::format("cas.{}", expected);
  std::string claim_value = new_claim_value();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_);
  std::optional<std::uint64_t> claim;
  auto pause = std::chrono::milliseconds(5);
  while (!(claim = publish_if(claim_key, claim_value, 0))) {
    auto held = get_dated(claim_key);
    if (!held) return std::nullopt;  // it cleared: the caller reads again
    Millis age = server_now() - held->written_at;
    if (age > kStaleClaim) {
      remove(held->record.revision);
      return std::nullopt;
    }
    if (on_claim == OnClaim::Pass) return std::nullopt;
    // Watch this claim until it clears or the cluster's clock says it is stale.
    auto stale_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kStaleClaim - age);
    for (;;) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        const std::string& v = held->record.value;
        auto pid_at = v.find("\"p\":"), host_at = v.find("\"h\":\"");
        std::string holder =
            pid_at == std::string::npos
                ? std::string("another q process")
                : fmt::format(
                      "q process {}{}", std::strtoll(v.c_str() + pid_at + 4, nullptr, 10),
                      host_at == std::string::npos
                          ? std::string()
                          : " on " + v.substr(host_at + 5, v.find('"', host_at + 5) - host_at - 5));
        throw Error(ErrorKind::Busy,
                    fmt::format("nats://{}: writing {}: {} holds its claim {} (taken at {} by the "
                                "cluster's clock, {} ago; a claim is judged dead after {}); "
                                "waited {}, try again",
                                location_.ns, key, holder, claim_key, format_time(held->written_at),
                                format_duration(std::max<Millis>(age, 0)),
                                format_duration(kStaleClaim), format_duration(timeout_)));
      }
      auto wake = std::min({now + pause, stale_at, deadline});
      std::this_thread::sleep_until(wake);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
      auto again = get(claim_key);
      if (!again || again->revision != held->record.revision) break;  // cleared (or anew)
      if (std::chrono::steady_clock::now() >= stale_at) break;        // judge it again
    }
    if (auto again = get(claim_key); !again || again->revision != held->record.revision)
      return std::nullopt;
  }
  kill_point("cas-claimed");
  std::optional<std::uint64_t> rev;
  try {
    rev = publish_if(key, value, expected);
  } catch (...) {
    try {
      remove(*claim);
    } catch (...) {  // a claim left behind goes stale (above)
    }
    throw;
  }
  kill_point("cas-written");
  remove(*claim);
  return rev;
}

Millis Client::server_now() {
  ensure_bucket();
  std::string subj = subject("clock");
  std::string token = random_token();
  jsErrCode code{};
  natsStatus s = retry(
      "reading the cluster's clock",
      [&](jsErrCode* err) {
        jsPubAck* pa = nullptr;
        natsStatus st = js_Publish(&pa, js_, subj.c_str(), token.data(),
                                   static_cast<int>(token.size()), nullptr, err);
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s != NATS_OK) fail("reading the cluster's clock", s, code);
  // The newest probe: ours, or one written after it.
  auto probe = get_dated("clock");
  if (!probe) fail("reading the cluster's clock", NATS_NOT_FOUND, {});
  return probe->written_at;
}

std::optional<std::uint64_t> Client::publish_if(const std::string& key, const std::string& value,
                                                std::uint64_t expected) {
  ensure_bucket();
  std::string subj = subject(key);
  natsMsg* raw = nullptr;
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), nullptr, value.data(), static_cast<int>(value.size()));
  MsgPtr msg(raw);
  if (s != NATS_OK) fail("writing " + key, s, {});
  jsPubOptions po;
  jsPubOptions_Init(&po);
  if (expected == 0)
    po.ExpectNoMessage = true;
  else
    po.ExpectLastSubjectSeq = expected;
  int attempts = 0;
  std::uint64_t revision = 0;
  jsErrCode code{};
  s = retry(
      "writing " + key,
      [&](jsErrCode* err) {
        ++attempts;
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, js_, msg.get(), &po, err);
        if (st == NATS_OK) revision = pa->Sequence;
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s == NATS_OK) return revision;
  if (code == kWrongLastSequence) {
    // A retried write may have been stored the first time: then the record
    // holds this very value (unique by its token).
    if (attempts > 1)
      if (auto now = get(key); now && now->value == value) return now->revision;
    return std::nullopt;
  }
  fail("writing " + key, s, code);
}

void Client::remove(std::uint64_t revision) {
  ensure_bucket();
  jsErrCode code{};
  natsStatus s = retry(
      "removing a record",
      [&](jsErrCode* err) {
        return js_DeleteMsg(js_, bucket_stream_.c_str(), revision, nullptr, err);
      },
      &code);
  // Gone already: replaced by a newer record of its key, or removed by a retry.
  // (10057: no message of that sequence; 10043: "sequence N not found", as a
  // stream's leader answers while another delete of it is under way.)
  if (s != NATS_OK && s != NATS_NOT_FOUND && code != static_cast<jsErrCode>(10057) &&
      code != static_cast<jsErrCode>(10043))
    fail("removing a record", s, code);
}

void Client::each(const std::string& filter,
                  const std::function<void(const std::string&, const Record&)>& each) {
  ensure_bucket();
  kvWatchOptions wo;
  kvWatchOptions_Init(&wo);
  wo.IgnoreDeletes = true;
  // The KV handle costs a round trip, and only listing needs it.
  // The bucket is there (open_bucket): "not found" from the KV calls means
  // the cluster cannot answer (2 of 3 nodes down: "no stream matches
  // subject"), so it is waited out as the other calls' errors are.
  auto unanswered = [](natsStatus st) {
    if (st == NATS_NOT_FOUND ||
        (st == NATS_ERR &&
         last_error_text().find("no stream matches subject") != std::string::npos))
      return NATS_TIMEOUT;
    return st;
  };
  if (!kv_) {
    natsStatus s = retry("opening the bucket " + bucket_, [&](jsErrCode*) {
      return unanswered(js_KeyValue(&kv_, js_, bucket_.c_str()));
    });
    if (s != NATS_OK) fail("opening the bucket " + bucket_, s, {});
  }
  kvWatcher* watcher = nullptr;
  natsStatus s = retry("listing " + filter, [&](jsErrCode*) {
    return unanswered(kvStore_Watch(&watcher, kv_, filter.c_str(), &wo));
  });
  if (s != NATS_OK) fail("listing " + filter, s, {});
  std::unique_ptr<kvWatcher, Deleter<kvWatcher, kvWatcher_Destroy>> hold(watcher);
  for (;;) {
    kvEntry* entry = nullptr;
    s = kvWatcher_Next(&entry, watcher, timeout_);
    if (s != NATS_OK) fail("listing " + filter, s, {});
    if (!entry) return;  // every record present when the watch began was seen
    std::unique_ptr<kvEntry, Deleter<kvEntry, kvEntry_Destroy>> e(entry);
    Record r{std::string(static_cast<const char*>(kvEntry_Value(entry)),
                         static_cast<std::size_t>(kvEntry_ValueLen(entry))),
             kvEntry_Revision(entry)};
    each(kvEntry_Key(entry), r);
  }
}

void Client::purge(const std::string& filter) {
  ensure_bucket();
  std::string subj = subject(filter);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Purge.Subject = subj.c_str();
  jsErrCode code{};
  natsStatus s = retry(
      "removing " + filter,
      [&](jsErrCode* err) { return js_PurgeStream(js_, bucket_stream_.c_str(), &jo, err); }, &code);
  if (s != NATS_OK) fail("removing " + filter, s, code);
}

}  // namespace q::nats
