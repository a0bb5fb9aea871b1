// Model-based fuzzer: an input is a program of queue operations (send, receive,
// ack, nack, extend, dead-letter, time passing, redrive, purge, a q work --to
// stage: stage_model.hpp) run against libq
// (the LMDB backend, with a fake clock) and against a small in-memory model of
// the documented semantics of a standard queue. After every step the results
// (ids, bodies, receive counts, errors, receipt outcomes) and the whole
// observable state (stats, peek, dead letters) must agree; a disagreement
// prints the program so far and aborts.
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bytes.hpp"
#include "libq/error.hpp"
#include "libq/lmdb/broker.hpp"
#include "libq/lmdb/records.hpp"
#include "stage_model.hpp"
#include "cli/work/worker_policy.hpp"

namespace {

using namespace q;

struct MMsg {
  std::uint64_t seq = 0;
  std::string body;
  Millis sent_at = 0, visible_at = 0, available_at = 0;
  bool leased = false, delayed = false;
  std::uint32_t receive_count = 0;
  std::string receipt;  // the current one; empty: none
  Millis first_received_at = 0, last_received_at = 0;
  std::string reason;
  Millis dead_at = 0;
};

// The model: what README.md and ARCHITECTURE.md promise, written plainly.
struct Model {
  QueueConfig config;
  Millis now = 0;
  std::map<std::uint64_t, MMsg> live, dead;
  std::map<std::string, std::pair<std::uint64_t, Millis>> dedup;
  QueueCounters counters;
  std::uint64_t next_seq = 1;
  // The shared rate budget (QueueConfig::rate), as q-config(1) documents it:
  // one start every 1/rate s, a burst of a tenth of a second's worth, a state
  // never further ahead of now than a burst and one interval, reset when the
  // rate changes.
  std::int64_t rate_tat_us = 0;
  double interval_us() const { return 1e6 / config.rate; }
  double tolerance_us() const { return interval_us() * std::floor(config.rate / 10); }
  double rate_tat(double now_us) const {
    double tat = std::max(static_cast<double>(rate_tat_us), now_us);
    return std::min(tat, now_us + tolerance_us() + interval_us());
  }
  std::uint64_t rate_allows() const {
    if (config.rate <= 0) return UINT64_MAX;
    double now_us = static_cast<double>(now) * 1000;
    double tat = rate_tat(now_us);
    if (tat > now_us + tolerance_us()) return 0;
    return static_cast<std::uint64_t>((now_us + tolerance_us() - tat) / interval_us()) + 1;
  }
  Millis rate_ready_at() const {
    if (config.rate <= 0) return INT64_MIN;
    double now_us = static_cast<double>(now) * 1000;
    if (static_cast<double>(rate_tat_us) > now_us + tolerance_us() + interval_us()) return now;
    return static_cast<Millis>(std::ceil((rate_tat(now_us) - tolerance_us()) / 1000));
  }
  void rate_take(std::uint64_t starts) {
    if (config.rate <= 0 || starts == 0) return;
    double tat = rate_tat(static_cast<double>(now) * 1000);
    rate_tat_us = static_cast<std::int64_t>(tat + interval_us() * static_cast<double>(starts));
  }

  MMsg* by_receipt(const std::string& receipt) {
    auto parsed = store::parse_receipt(receipt);
    if (!parsed) return nullptr;
    auto it = live.find(parsed->seq);
    if (it == live.end() || it->second.receipt != receipt) return nullptr;
    return &it->second;
  }
  // The kind of error current_delivery would throw, if any.
  std::optional<ErrorKind> receipt_error(const std::string& receipt) {
    if (!store::parse_receipt(receipt)) return ErrorKind::InvalidData;
    if (!by_receipt(receipt)) return ErrorKind::Stale;
    return std::nullopt;
  }
  void to_dead(MMsg& m, std::string reason) {
    MMsg d = m;
    d.leased = d.delayed = false;
    d.receipt.clear();
    d.dead_at = now;
    d.reason = std::move(reason);
    dead[d.seq] = d;
    live.erase(m.seq);
    ++counters.dead_lettered;
  }
  // What every write transaction on the queue does first: messages past the
  // retention (counted from when they became available) and dead letters past
  // 14 days go, at most 1000 of each, oldest first.
  void maintain() {
    if (config.rate > 0)
      rate_tat_us = static_cast<std::int64_t>(rate_tat(static_cast<double>(now) * 1000));
    auto expire = [&](std::map<std::uint64_t, MMsg>& from, auto time_of) {
      std::vector<std::pair<Millis, std::uint64_t>> due;
      for (auto& [seq, m] : from)
        if (time_of(m) <= now) due.emplace_back(time_of(m), seq);
      std::sort(due.begin(), due.end());
      if (due.size() > 1000) due.resize(1000);
      for (auto& [time, seq] : due) from.erase(seq);
      counters.expired += due.size();
    };
    expire(live, [&](const MMsg& m) { return m.available_at + config.retention; });
    expire(dead, [&](const MMsg& m) { return m.dead_at + kDeadLetterRetention; });
  }
  bool any_visible() const {
    for (auto& [seq, m] : live)
      if (m.visible_at <= now) return true;
    return false;
  }

  // The next visible message: smallest (visible_at, seq); not one this receive
  // already delivered (with a visibility timeout of 0 it is visible again at once).
  MMsg* next_visible(const std::set<std::uint64_t>& taken = {}) {
    MMsg* best = nullptr;
    for (auto& [seq, m] : live)
      if (m.visible_at <= now && !taken.count(seq) &&
          (!best || std::tie(m.visible_at, m.seq) < std::tie(best->visible_at, best->seq)))
        best = &m;
    return best;
  }
};

[[noreturn]] void disagree(const std::vector<std::string>& trace, const std::string& what) {
  std::fprintf(stderr, "fuzz_model: libq and the model disagree: %s\nprogram:\n", what.c_str());
  for (const auto& step : trace) std::fprintf(stderr, "  %s\n", step.c_str());
  std::abort();
}

const std::string& tmp_dir() {
  // Never destroyed: the exit handler that removes it runs after static destructors.
  static const std::string* dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "q-fuzz-model-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    auto* d = new std::string(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(tmp_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

const char* kind_name(std::optional<ErrorKind> k) {
  if (!k) return "ok";
  switch (*k) {
    case ErrorKind::Usage: return "Usage";
    case ErrorKind::InvalidData: return "InvalidData";
    case ErrorKind::NotFound: return "NotFound";
    case ErrorKind::Stale: return "Stale";
    case ErrorKind::Full: return "Full";
    case ErrorKind::Busy: return "Busy";
    case ErrorKind::Io: return "Io";
    case ErrorKind::Permission: return "Permission";
    case ErrorKind::ReadOnly: return "ReadOnly";
  }
  return "?";
}

class Run {
 public:
  explicit Run(qfuzz::Bytes& in) : in_(in) {}

  void go() {
    std::filesystem::remove(path());
    std::filesystem::remove(path() + "-lock");
    open(true);

    // The queue's settings come from the input too.
    ConfigChange change;
    static const Millis vts[] = {0, 1000, 5000, 30000};
    static const std::uint32_t max_receives[] = {0, 1, 2, 3, 5};
    static const std::uint64_t depths[] = {0, 0, 3, 10};
    static const Millis windows[] = {300000, 10000};
    change.visibility_timeout = vts[in_.below(4)];
    change.max_receives = max_receives[in_.below(5)];
    change.max_depth = depths[in_.below(4)];
    change.dedup_window = windows[in_.below(2)];
    static const Millis retentions[] = {4 * kDay, kHour, kDay};
    change.retention = retentions[in_.below(3)];
    broker_->create_queue("m", change);
    broker_->create_queue("d", {});  // a stage's DST
    m_.config = apply(QueueConfig{}, change);
    trace_.push_back(
        fmt::format("create m vt={} max_receives={} max_depth={} dedup_window={} "
                    "retention={}",
                    *change.visibility_timeout, *change.max_receives, *change.max_depth,
                    *change.dedup_window, *change.retention));

    for (int step = 0; step < 400 && !in_.empty(); ++step) {
      m_.now = clock_.now();
      switch (in_.below(16)) {
        case 0:
        case 1: send(); break;
        case 2:
        case 3: receive(); break;
        case 4: ack(); break;
        case 5: nack(); break;
        case 6: extend(); break;
        case 7:
        case 8: advance(); break;
        case 9: redrive(); break;
        case 10: dead_letter(); break;
        case 11:
          if (in_.below(4) == 0)
            purge();
          else
            advance();
          break;
        case 12: reopen(); break;
        case 13: import(); break;
        case 14: configure_rate(); break;
        case 15: stage(); break;
      }
      compare_state();
      check_verify();
    }
    broker_.reset();
  }

 private:
  static std::string path() { return tmp_dir() + "/model.q"; }

  void open(bool create) {
    LmdbOptions options;
    options.open.path = path();
    options.open.create = create;
    options.open.durable = false;
    options.clock = &clock_;
    options.random = [this] { return ++nonce_; };
    broker_ = open_lmdb_broker(options);
  }

  // Closes the environment and opens the file again, as the next process
  // would: what one process committed must be usable by the next (a false
  // "truncated" refusal after a bulk purge once made every new process fail).
  void reopen() {
    trace_.push_back(fmt::format("t={} reopen", m_.now));
    broker_.reset();
    auto kind = attempt([&] { open(false); });
    expect_kind("reopen", kind, std::nullopt);
  }

  void check_verify() {
    auto problems = broker_->verify();
    if (!problems.empty()) disagree(trace_, fmt::format("verify: {}", fmt::join(problems, "; ")));
  }

  // ---- operations -----------------------------------------------------------
  template <typename F>
  std::optional<ErrorKind> attempt(F&& f) {
    try {
      f();
      return std::nullopt;
    } catch (const Error& e) {
      last_error_ = e.what();
      return e.kind();
    }
  }
  void expect_kind(const char* op, std::optional<ErrorKind> got, std::optional<ErrorKind> want) {
    if (got != want)
      disagree(trace_, fmt::format("{}: libq says {} ({}), the model {}", op, kind_name(got),
                                   got ? last_error_ : "", kind_name(want)));
  }

  std::string pick_receipt() {
    // Mostly a receipt we were given (current or stale), sometimes a made-up one.
    std::uint32_t r = in_.below(16);
    if (!receipts_.empty() && r < 13)
      return receipts_[in_.below(static_cast<std::uint32_t>(receipts_.size()))];
    if (r == 13) return "m1.0000000000000001";
    if (r == 14) return "garbage";
    return store::receipt(1 + in_.below(8), 1 + in_.below(4));
  }

  void send() {
    // Mostly a few messages; sometimes a bulk batch of larger bodies, so that
    // purges and drains free many pages in one transaction.
    const bool bulk = in_.below(10) == 0;
    std::uint32_t n = bulk ? 50 + in_.below(600) : 1 + in_.below(3);
    const std::string padding(bulk ? in_.below(300) : 0, 'p');
    std::vector<OutgoingMessage> batch;
    std::string dedup_id;
    if (n == 1 && in_.below(3) == 0) dedup_id = fmt::format("d{}", in_.below(4));
    for (std::uint32_t k = 0; k < n; ++k)
      batch.push_back(
          {fmt::format("b{}-{}{}", body_counter_++, in_.below(100), padding), {}, dedup_id, ""});
    SendOptions options;
    Millis delay = 0;
    if (in_.below(4) == 0) {
      static const Millis delays[] = {0, 1, 1000, 30000};
      delay = delays[in_.below(4)];
      options.delay = delay;
    }
    trace_.push_back(fmt::format("t={} send {} message(s){}{}", m_.now, n,
                                 dedup_id.empty() ? "" : " dedup " + dedup_id,
                                 options.delay ? fmt::format(" delay {}", delay) : ""));
    std::vector<std::string> bodies;
    for (auto& m : batch) bodies.push_back(m.body);

    // The model.
    const Model saved = m_;
    m_.maintain();
    std::optional<ErrorKind> want;
    std::vector<SendResult> expected;
    std::optional<std::uint64_t> dup;
    if (!dedup_id.empty()) {
      auto it = m_.dedup.find(dedup_id);
      if (it != m_.dedup.end() && it->second.second > m_.now) dup = it->second.first;
    }
    std::uint64_t fresh = dup ? 0 : n;
    if (m_.config.max_depth != 0 && m_.live.size() + fresh > m_.config.max_depth)
      want = ErrorKind::Full;

    std::vector<SendResult> got;
    auto kind = attempt([&] { got = broker_->send("m", batch, options); });
    expect_kind("send", kind, want);
    if (kind) {
      m_ = saved;
      return;
    }
    if (dup) {
      expected.push_back({store::message_id(*dup), true});
      ++m_.counters.deduplicated;
    } else {
      for (auto& body : bodies) {
        MMsg msg;
        msg.seq = m_.next_seq++;
        msg.body = body;
        msg.sent_at = m_.now;
        msg.visible_at = msg.available_at = m_.now + delay;
        msg.delayed = delay > 0;
        m_.live[msg.seq] = msg;
        if (!dedup_id.empty()) m_.dedup[dedup_id] = {msg.seq, m_.now + m_.config.dedup_window};
        expected.push_back({store::message_id(msg.seq), false});
        ++m_.counters.sent;
      }
    }
    if (got.size() != expected.size())
      disagree(trace_, fmt::format("send: {} results, the model {}", got.size(), expected.size()));
    for (std::size_t k = 0; k < got.size(); ++k)
      if (got[k].id != expected[k].id || got[k].duplicate != expected[k].duplicate)
        disagree(trace_,
                 fmt::format("send: result {} is {} (duplicate {}), the model {} ({})", k,
                             got[k].id, got[k].duplicate, expected[k].id, expected[k].duplicate));
  }

  void receive() {
    ReceiveOptions options;
    options.max_messages = in_.below(8) == 0 ? 1000 : 1 + in_.below(4);
    static const Millis vts[] = {-1, 0, 1000, 5000, 30000};
    Millis vt = vts[in_.below(5)];
    if (vt >= 0) options.visibility_timeout = vt;
    Millis timeout = vt >= 0 ? vt : m_.config.visibility_timeout;
    options.rate_limited = m_.config.rate > 0 && in_.coin();
    trace_.push_back(fmt::format("t={} receive -n {} vt {}{}", m_.now, options.max_messages, vt,
                                 options.rate_limited ? " rate-limited" : ""));

    std::vector<Message> got;
    auto kind = attempt([&] { got = broker_->receive("m", options); });
    expect_kind("receive", kind, std::nullopt);
    // An idle receive writes nothing (nothing visible, or the rate budget not
    // ready); one with something due runs maintenance, then takes what the
    // budget allows.
    std::uint64_t want = 0;
    if (m_.any_visible() && (!options.rate_limited || m_.rate_ready_at() <= m_.now)) {
      m_.maintain();
      want = std::min<std::uint64_t>(options.max_messages,
                                     options.rate_limited ? m_.rate_allows() : UINT64_MAX);
    }

    std::vector<MMsg> expected;
    std::set<std::uint64_t> taken;
    while (expected.size() < want) {
      MMsg* m = m_.next_visible(taken);
      if (!m) break;
      if (m_.config.max_receives != 0 && m->receive_count >= m_.config.max_receives) {
        std::string reason =
            m->reason.empty() ? "not acknowledged after " + q::plural(m->receive_count, "receive")
                              : m->reason;
        m_.to_dead(*m, reason);
        continue;
      }
      m->receive_count += 1;
      if (!m->first_received_at) m->first_received_at = m_.now;
      m->last_received_at = m_.now;
      m->visible_at = m_.now + timeout;
      m->leased = true;
      m->delayed = false;
      ++m_.counters.received;
      taken.insert(m->seq);
      expected.push_back(*m);
    }
    if (options.rate_limited) m_.rate_take(expected.size());
    if (got.size() != expected.size())
      disagree(trace_,
               fmt::format("receive: {} messages, the model {}", got.size(), expected.size()));
    for (std::size_t k = 0; k < got.size(); ++k) {
      const auto& g = got[k];
      const auto& e = expected[k];
      if (g.id != store::message_id(e.seq) || g.body != e.body ||
          g.receive_count != e.receive_count || g.visible_at != e.visible_at ||
          g.last_received_at != e.last_received_at || g.first_received_at != e.first_received_at)
        disagree(trace_,
                 fmt::format("receive: message {} is {} '{}' count {} until {}, the model "
                             "{} '{}' count {} until {}",
                             k, g.id, g.body, g.receive_count, g.visible_at,
                             store::message_id(e.seq), e.body, e.receive_count, e.visible_at));
      auto parsed = store::parse_receipt(g.receipt);
      if (!parsed || parsed->seq != e.seq || !seen_receipts_.insert(g.receipt).second)
        disagree(trace_,
                 fmt::format("receive: receipt {} of {} is malformed or not new", g.receipt, g.id));
      m_.live[e.seq].receipt = g.receipt;
      receipts_.push_back(g.receipt);
    }
  }

  void ack() {
    std::vector<std::string> receipts;
    if (in_.below(8) == 0) {
      receipts = receipts_;  // a bulk ack of every receipt handed out, most stale
    } else {
      std::uint32_t n = 1 + in_.below(3);
      for (std::uint32_t k = 0; k < n; ++k) receipts.push_back(pick_receipt());
    }
    // The same receipt twice in one call: one ack.
    if (!receipts.empty() && in_.below(4) == 0) receipts.push_back(receipts.front());
    trace_.push_back(fmt::format("t={} ack {}", m_.now, fmt::join(receipts, " ")));
    m_.maintain();
    std::vector<ReceiptResult> got;
    auto kind = attempt([&] { got = broker_->ack("m", receipts); });
    expect_kind("ack", kind, std::nullopt);
    if (got.size() != receipts.size()) disagree(trace_, "ack: wrong number of results");
    // A receipt repeated in one call is one ack, reported the same each time.
    std::map<std::string, ReceiptOutcome> first;
    for (std::size_t k = 0; k < receipts.size(); ++k) {
      ReceiptOutcome want = ReceiptOutcome::Done;
      auto err = m_.receipt_error(receipts[k]);
      if (first.count(receipts[k]))
        want = first[receipts[k]];
      else if (err == ErrorKind::InvalidData)
        want = ReceiptOutcome::Malformed;
      else if (err == ErrorKind::Stale) {
        want = ReceiptOutcome::Stale;
        ++m_.counters.stale_acks;
      } else {
        m_.live.erase(m_.by_receipt(receipts[k])->seq);
        ++m_.counters.acked;
      }
      first.emplace(receipts[k], want);
      if (got[k].outcome != want)
        disagree(trace_, fmt::format("ack {}: outcome {}, the model {} ({})", receipts[k],
                                     static_cast<int>(got[k].outcome), static_cast<int>(want),
                                     got[k].detail));
    }
  }

  void nack() {
    std::string receipt = pick_receipt();
    NackOptions options;
    static const Millis delays[] = {0, 0, 1, 1000, 20000, kMaxDelay + 1};
    options.delay = delays[in_.below(6)];
    if (in_.coin()) options.reason = fmt::format("why{}", in_.below(10));
    trace_.push_back(fmt::format("t={} nack {} delay {} reason '{}'", m_.now, receipt,
                                 options.delay, options.reason));
    std::optional<ErrorKind> want;
    const Model saved = m_;
    m_.maintain();
    if (options.delay < 0 || options.delay > kMaxDelay)
      want = ErrorKind::Usage;
    else
      want = m_.receipt_error(receipt);
    Millis got = 0;
    auto kind = attempt([&] { got = broker_->nack("m", receipt, options); });
    expect_kind("nack", kind, want);
    if (kind) {
      m_ = saved;
      return;
    }
    MMsg* m = m_.by_receipt(receipt);
    m->visible_at = m_.now + options.delay;
    m->leased = false;
    m->delayed = options.delay > 0;
    m->receipt.clear();
    if (!options.reason.empty()) m->reason = options.reason;
    ++m_.counters.nacked;
    if (got != m->visible_at)
      disagree(trace_, fmt::format("nack: visible at {}, the model {}", got, m->visible_at));
  }

  void extend() {
    std::string receipt = pick_receipt();
    static const Millis bys[] = {
        0, 1000, 5000, 60000, kMaxVisibilityTimeout, kMaxVisibilityTimeout + 1};
    Millis by = bys[in_.below(6)];
    trace_.push_back(fmt::format("t={} extend {} by {}", m_.now, receipt, by));
    std::optional<ErrorKind> want;
    const Model saved = m_;
    m_.maintain();
    if (by < 0 || by > kMaxVisibilityTimeout)
      want = ErrorKind::Usage;
    else
      want = m_.receipt_error(receipt);
    MMsg* m = want ? nullptr : m_.by_receipt(receipt);
    if (m && m_.now + by > m->last_received_at + kMaxVisibilityTimeout)
      want = ErrorKind::InvalidData;
    Millis got = 0;
    auto kind = attempt([&] { got = broker_->extend("m", receipt, by); });
    expect_kind("extend", kind, want);
    if (kind) {
      m_ = saved;
      return;
    }
    m->visible_at = m_.now + by;
    m->leased = true;
    m->delayed = false;
    if (got != m->visible_at)
      disagree(trace_, fmt::format("extend: until {}, the model {}", got, m->visible_at));
  }

  void dead_letter() {
    std::string receipt = pick_receipt();
    std::string reason = fmt::format("poison{}", in_.below(5));
    trace_.push_back(fmt::format("t={} dead-letter {} '{}'", m_.now, receipt, reason));
    const Model saved = m_;
    m_.maintain();
    auto want = m_.receipt_error(receipt);
    auto kind = attempt([&] { broker_->dead_letter("m", receipt, reason); });
    expect_kind("dead_letter", kind, want);
    if (kind) {
      m_ = saved;
      return;
    }
    m_.to_dead(*m_.by_receipt(receipt), reason);
  }

  // One run of `q work m --to d`: the command writes its output through the
  // descriptor routes of the plan; what q work read must be the model's
  // output, and the ack of the source with the send of its messages, one
  // transaction, must leave exactly those on d (emptied after each stage).
  void stage() {
    const qfuzz::StagePlan plan = qfuzz::plan_stage(in_);
    const std::string receipt = pick_receipt();
    trace_.push_back(fmt::format("t={} stage {} -> d, {}", m_.now, receipt, qfuzz::describe(plan)));
    const auto ran = qfuzz::run_stage(plan);
    if (!ran.error.empty()) disagree(trace_, "stage: the command's " + ran.error);
    const std::string want = qfuzz::expected_output(plan);
    if (want.size() > plan.limit) {  // the run fails; the source stays in flight
      if (ran.output)
        disagree(trace_, fmt::format("stage: {} bytes read past --to-max-bytes {}",
                                     ran.output->size(), plan.limit));
      return;
    }
    if (ran.output != want)
      disagree(trace_, fmt::format("stage: q work read '{}' ({} bytes), the command wrote '{}'",
                                   qfuzz::shown(ran.output.value_or("(refused)")),
                                   ran.output ? ran.output->size() : 0, qfuzz::shown(want)));
    cli::work::StageOptions options;
    options.to = "d";
    options.lines = plan.lines;
    options.max_bytes = plan.limit;
    // A lost lease sends nothing (q-work(1): the output of a run whose lease
    // was lost is not sent) and counts a stale ack; a malformed receipt
    // writes nothing, not even the maintenance.
    const Model saved = m_;
    m_.maintain();
    const auto err = m_.receipt_error(receipt);
    if (err == ErrorKind::InvalidData)
      m_ = saved;
    else if (err)
      ++m_.counters.stale_acks;
    AckSendResult got;
    auto kind = attempt([&] {
      got = broker_->ack_and_send("m", receipt, "d",
                                  cli::work::stage_messages(Message{}, *ran.output, options), {});
    });
    expect_kind("ack_and_send", kind, std::nullopt);
    const ReceiptOutcome outcome = !err                            ? ReceiptOutcome::Done
                                   : err == ErrorKind::InvalidData ? ReceiptOutcome::Malformed
                                                                   : ReceiptOutcome::Stale;
    if (got.outcome != outcome)
      disagree(trace_, fmt::format("stage: ack outcome {}, the model {}",
                                   static_cast<int>(got.outcome), static_cast<int>(outcome)));
    std::vector<std::string> bodies;
    if (outcome == ReceiptOutcome::Done) {
      m_.live.erase(m_.by_receipt(receipt)->seq);
      ++m_.counters.acked;
      bodies = qfuzz::expected_bodies(plan);
      m_.next_seq += bodies.size();  // one sequence for every queue of the file
    }
    std::vector<std::string> on_dst;
    for (const auto& g : broker_->peek("d", 100000)) on_dst.push_back(g.body);
    if (on_dst != bodies || got.sent.size() != bodies.size())
      disagree(trace_,
               fmt::format("stage: d holds [{}] ({} sent), the model [{}]",
                           qfuzz::shown(fmt::format("{}", fmt::join(on_dst, "|"))), got.sent.size(),
                           qfuzz::shown(fmt::format("{}", fmt::join(bodies, "|")))));
    if (!on_dst.empty()) broker_->purge("d");
  }

  void advance() {
    // Up to weeks: retention (1 h to 4 d) and dead-letter expiry (14 d) must
    // hold across large steps, redrive after retention included.
    static const Millis steps[] = {1,     10,    999,    1000,  1001, 4999,     5000,
                                   30000, 60000, 360000, kHour, kDay, 4 * kDay, 15 * kDay};
    Millis by = steps[in_.below(14)];
    trace_.push_back(fmt::format("t={} advance {} ms", m_.now, by));
    clock_.advance(by);
  }

  void redrive() {
    RedriveOptions options;
    std::uint32_t how = in_.below(4);
    std::optional<ErrorKind> want;
    std::vector<std::uint64_t> chosen;
    const Model saved = m_;
    m_.maintain();
    if (how == 0 && !m_.dead.empty()) {
      // One by id (first, or a live message: not a dead letter), sometimes
      // given twice: it moves once.
      auto seq = in_.coin() ? m_.dead.begin()->first : m_.next_seq + 5;
      options.ids.push_back(store::message_id(seq));
      if (in_.coin()) options.ids.push_back(store::message_id(seq));
      if (m_.dead.count(seq))
        chosen.push_back(seq);
      else
        want = ErrorKind::NotFound;
    } else {
      if (how == 1) options.max = in_.below(3);
      for (auto& [seq, d] : m_.dead) {
        if (options.max && chosen.size() >= *options.max) break;
        chosen.push_back(seq);
      }
    }
    options.dry_run = in_.below(5) == 0;
    trace_.push_back(
        fmt::format("t={} redrive ids [{}] max {} dry-run {}", m_.now, fmt::join(options.ids, " "),
                    options.max ? static_cast<long>(*options.max) : -1L, options.dry_run));
    if (!want && !options.dry_run && m_.config.max_depth != 0 &&
        m_.live.size() + chosen.size() > m_.config.max_depth)
      want = ErrorKind::Full;
    std::vector<Message> got;
    auto kind = attempt([&] { got = broker_->redrive("m", options); });
    expect_kind("redrive", kind, want);
    if (kind) {
      m_ = saved;
      return;
    }
    if (got.size() != chosen.size())
      disagree(trace_,
               fmt::format("redrive: {} messages, the model {}", got.size(), chosen.size()));
    for (std::size_t k = 0; k < chosen.size(); ++k)
      if (got[k].id != store::message_id(chosen[k]) || got[k].body != m_.dead[chosen[k]].body)
        disagree(trace_, fmt::format("redrive: {} is {}, the model {}", k, got[k].id,
                                     store::message_id(chosen[k])));
    if (options.dry_run) {
      m_ = saved;
      return;
    }
    for (auto seq : chosen) {
      MMsg m = m_.dead[seq];
      m_.dead.erase(seq);
      m.visible_at = m.available_at = m_.now;
      m.receive_count = 0;
      m.first_received_at = m.last_received_at = 0;
      m.reason.clear();
      m.receipt.clear();
      m.leased = m.delayed = false;
      m.dead_at = 0;
      m_.live[seq] = m;
      ++m_.counters.redriven;
    }
  }

  // Imports of arbitrary records: ids that collide, repeat, sit at the end of
  // the sequence space or are not ids; times in the past, now and the future;
  // dead letters; dedup ids. The model follows q-import(1).
  void import() {
    std::uint32_t n = 1 + in_.below(4);
    std::vector<Message> records;
    for (std::uint32_t k = 0; k < n; ++k) {
      Message r;
      switch (in_.below(7)) {
        case 0: r.id = "mffffffffffffffff"; break;
        case 1: r.id = "mfffffffffffffff0"; break;
        case 2: r.id = "bogus"; break;
        case 3: r.id = m_.live.empty() ? "m1" : store::message_id(m_.live.begin()->first); break;
        case 4: r.id = k > 0 ? records[0].id : "m2"; break;
        default: r.id = store::message_id(m_.next_seq + 100 + in_.below(50)); break;
      }
      r.body = fmt::format("i{}", body_counter_++);
      static const Millis ages[] = {0, 1000, kHour, 5 * kDay, -kHour};
      r.sent_at = m_.now - ages[in_.below(5)];
      r.receive_count = in_.below(3);
      if (in_.below(4) == 0) r.dedup_id = fmt::format("d{}", in_.below(4));
      switch (in_.below(4)) {
        case 0:
          r.state = MessageState::Dead;
          r.dead_at = m_.now - in_.below(3) * kDay;
          r.reason = "imported";
          break;
        case 1:
          r.state = MessageState::Delayed;
          r.visible_at = m_.now + (in_.coin() ? kMinute : 5 * kDay);
          break;
        default: r.state = MessageState::Visible; break;
      }
      records.push_back(r);
    }
    std::vector<std::string> shown;
    for (auto& r : records)
      shown.push_back(fmt::format("{}@{}{}", r.id, r.sent_at, to_string(r.state)));
    trace_.push_back(fmt::format("t={} import [{}]", m_.now, fmt::join(shown, " ")));

    const Model saved = m_;
    m_.maintain();
    std::optional<ErrorKind> want;
    std::map<std::string, std::size_t> first;
    std::uint64_t live_new = 0;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      if (!first.emplace(r.id, i).second) continue;
      bool bad_time = r.sent_at > m_.now || (r.dead_at && *r.dead_at > m_.now);
      bool too_far =
          r.state == MessageState::Delayed && r.visible_at - m_.now >= m_.config.retention;
      if (!want && (bad_time || too_far)) want = ErrorKind::InvalidData;
      live_new += r.state != MessageState::Dead;
    }
    if (!want && m_.config.max_depth != 0 && m_.live.size() + live_new > m_.config.max_depth)
      want = ErrorKind::Full;
    std::vector<std::string> got;
    auto kind = attempt([&] { got = broker_->import_messages("m", records, false); });
    expect_kind("import", kind, want);
    if (kind) {
      m_ = saved;
      return;
    }
    bool keep = true;
    for (const auto& [id, i] : first) {
      auto seq = store::parse_message_id(id);
      if (!seq || *seq == 0 || *seq >= (std::uint64_t{1} << 52) || m_.live.count(*seq) ||
          m_.dead.count(*seq))
        keep = false;
    }
    std::vector<std::string> expected;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      if (first[r.id] != i) {
        expected.push_back(expected[first[r.id]]);
        continue;
      }
      std::uint64_t seq = keep ? *store::parse_message_id(r.id) : m_.next_seq;
      m_.next_seq = std::max(m_.next_seq, seq + 1);
      MMsg m;
      m.seq = seq;
      m.body = r.body;
      m.sent_at = r.sent_at;
      m.receive_count = r.receive_count;
      m.reason = r.reason;
      if (r.state == MessageState::Dead) {
        m.dead_at = r.dead_at.value_or(m_.now);
        m_.dead[seq] = m;
        // One counting rule on both backends (q-import(1)): an imported dead
        // letter was sent and then dead-lettered.
        ++m_.counters.sent;
        ++m_.counters.dead_lettered;
      } else {
        m.delayed = r.state == MessageState::Delayed && r.visible_at > m_.now;
        m.visible_at = m.available_at = m.delayed ? r.visible_at : m_.now;
        m_.live[seq] = m;
        ++m_.counters.sent;
        if (!r.dedup_id.empty() && r.sent_at + m_.config.dedup_window > m_.now) {
          auto it = m_.dedup.find(r.dedup_id);
          if (it == m_.dedup.end() || it->second.second <= m_.now)
            m_.dedup[r.dedup_id] = {seq, r.sent_at + m_.config.dedup_window};
        }
      }
      expected.push_back(store::message_id(seq));
    }
    if (got != expected)
      disagree(trace_, fmt::format("import: ids [{}], the model [{}]", fmt::join(got, " "),
                                   fmt::join(expected, " ")));
  }

  // A rate change mid-stream: the shared state of the old rate must not hold
  // back the new one (issue 12, break 5).
  void configure_rate() {
    static const double rates[] = {0, 1.0 / 3600, 2, 100};
    ConfigChange change;
    change.rate = rates[in_.below(4)];
    trace_.push_back(fmt::format("t={} config rate {}", m_.now, *change.rate));
    auto kind = attempt([&] { broker_->configure("m", change); });
    expect_kind("config", kind, std::nullopt);
    if (*change.rate != m_.config.rate) m_.rate_tat_us = 0;
    m_.config.rate = *change.rate;
  }

  void purge() {
    trace_.push_back(fmt::format("t={} purge", m_.now));
    std::uint64_t got = 0;
    auto kind = attempt([&] { got = broker_->purge("m"); });
    expect_kind("purge", kind, std::nullopt);
    if (got != m_.live.size())
      disagree(trace_, fmt::format("purge removed {}, the model {}", got, m_.live.size()));
    m_.live.clear();
  }

  // ---- the observable state --------------------------------------------------
  void compare_state() {
    m_.now = clock_.now();
    auto stats = broker_->stats("m").at(0);
    std::uint64_t visible = 0, in_flight = 0, delayed = 0;
    std::optional<Millis> oldest_available;
    for (auto& [seq, m] : m_.live) {
      if (m.visible_at <= m_.now)
        ++visible;
      else if (m.leased)
        ++in_flight;
      else
        ++delayed;
      if (!oldest_available || m.available_at < *oldest_available)
        oldest_available = m.available_at;
    }
    std::optional<Millis> oldest_age;
    if (oldest_available && *oldest_available <= m_.now) oldest_age = m_.now - *oldest_available;
    const auto& c = stats.counters;
    const auto& w = m_.counters;
    auto line = [](auto... v) {
      return fmt::format(
          "{}", fmt::join(std::vector<std::uint64_t>{static_cast<std::uint64_t>(v)...}, ","));
    };
    std::string have =
        line(stats.visible, stats.in_flight, stats.delayed, stats.dead, c.sent, c.received, c.acked,
             c.nacked, c.dead_lettered, c.redriven, c.expired, c.deduplicated, c.stale_acks);
    std::string want =
        line(visible, in_flight, delayed, m_.dead.size(), w.sent, w.received, w.acked, w.nacked,
             w.dead_lettered, w.redriven, w.expired, w.deduplicated, w.stale_acks);
    if (have != want)
      disagree(trace_,
               fmt::format("stats (visible,in_flight,delayed,dead,sent,received,acked,"
                           "nacked,dead_lettered,redriven,expired,deduplicated,stale_acks) are {}, "
                           "the model {}",
                           have, want));
    if (stats.oldest_age != oldest_age)
      disagree(trace_, fmt::format("oldest age {}, the model {}", stats.oldest_age.value_or(-1),
                                   oldest_age.value_or(-1)));

    auto peek = broker_->peek("m", 100000);
    if (peek.size() != m_.live.size())
      disagree(trace_,
               fmt::format("peek shows {} messages, the model {}", peek.size(), m_.live.size()));
    auto it = m_.live.begin();
    for (const auto& g : peek) {
      const auto& m = (it++)->second;
      MessageState state = m.visible_at <= m_.now ? MessageState::Visible
                           : m.leased             ? MessageState::InFlight
                                                  : MessageState::Delayed;
      if (g.id != store::message_id(m.seq) || g.body != m.body ||
          g.receive_count != m.receive_count || g.state != state || g.visible_at != m.visible_at ||
          g.sent_at != m.sent_at || g.reason != m.reason)
        disagree(trace_, fmt::format("peek: {} '{}' count {} state {} visible {} reason '{}'; the "
                                     "model {} '{}' count {} state {} visible {} reason '{}'",
                                     g.id, g.body, g.receive_count, to_string(g.state),
                                     g.visible_at, g.reason, store::message_id(m.seq), m.body,
                                     m.receive_count, to_string(state), m.visible_at, m.reason));
    }
    auto dead = broker_->dead_letters("m", 100000);
    if (dead.size() != m_.dead.size())
      disagree(trace_, fmt::format("{} dead letters, the model {}", dead.size(), m_.dead.size()));
    auto d = m_.dead.begin();
    for (const auto& g : dead) {
      const auto& m = (d++)->second;
      if (g.id != store::message_id(m.seq) || g.body != m.body ||
          g.receive_count != m.receive_count || g.reason != m.reason || g.dead_at != m.dead_at)
        disagree(trace_, fmt::format("dead letter {} '{}' count {} reason '{}'; the model {} '{}' "
                                     "count {} reason '{}'",
                                     g.id, g.body, g.receive_count, g.reason,
                                     store::message_id(m.seq), m.body, m.receive_count, m.reason));
    }
  }

  qfuzz::Bytes& in_;
  FakeClock clock_;
  std::uint64_t nonce_ = 0;
  std::unique_ptr<Broker> broker_;
  Model m_;
  std::vector<std::string> trace_;
  std::vector<std::string> receipts_;
  std::set<std::string> seen_receipts_;
  std::string last_error_;
  std::uint64_t body_counter_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qfuzz::Bytes in(data, size);
  Run run(in);
  run.go();
  return 0;
}
