#include "worker.hpp"

#include <signal.h>
#include <unistd.h>
#include <poll.h>

#include <algorithm>
#include <deque>
#include <map>

#include <fmt/format.h>

#include "error.hpp"
#include "files.hpp"
#include "descendants.hpp"
#include "holder.hpp"
#include "stop_signals.hpp"
#include "output.hpp"
#include "rate_limiter.hpp"
#include "timefmt.hpp"
#include "worker_child.hpp"
#include "worker_policy.hpp"
#include "worker_progress.hpp"

namespace cli {
namespace {

using q::Millis;
using work::Ending;

// A message taken, its command running or ended and its outcome not yet recorded.
struct Job {
  q::Message message;
  std::string key;  // idempotency key; empty: none
  work::Child child;
  int output_fd = -1;  // --to: the read end of the command's stdout pipe
  Ending ending;
  Millis next_heartbeat = 0;
  Millis deadline = INT64_MAX;  // --timeout: SIGTERM
  Millis kill_at = INT64_MAX;   // SIGKILL after a SIGTERM (timeout or stop)
  bool lease_lost = false;
  bool skip = false;  // an idempotent repeat: ack without running
};

// --to: DST must exist, differ from the source and take the output's group.
work::StageOptions stage_options(q::Broker& broker, const WorkOptions& o,
                                 const q::QueueConfig& source) {
  work::StageOptions stage;
  if (o.to.empty()) return stage;
  if (o.to == o.queue)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("--to {}: the queue this stage consumes; name another", o.to));
  auto target = broker.configure(o.to, {});  // NotFound: refused before any message is taken
  // Every group mismatch is refused here, before any message is taken: found
  // per message, each would fail and be dead-lettered (issue 25 item 13).
  auto refuse = [](const std::string& why) { throw q::Error(q::ErrorKind::Usage, why); };
  if (target.fifo && !o.to_group && !source.fifo)
    refuse(
        fmt::format("--to {}: a FIFO queue, and queue {} has no groups to carry over; give "
                    "--to-group",
                    o.to, o.queue));
  if (!target.fifo && o.to_group)
    refuse(
        fmt::format("--to-group: queue {} is a standard queue (groups are for FIFO queues)", o.to));
  if (!target.fifo && source.fifo)
    refuse(
        fmt::format("--to {}: a standard queue, and queue {} is FIFO: its groups cannot be "
                    "carried over; send to a FIFO queue",
                    o.to, o.queue));
  if (o.to_group) {
    const auto& g = *o.to_group;
    bool printable =
        std::all_of(g.begin(), g.end(), [](unsigned char c) { return c > 0x20 && c < 0x7F; });
    if (g.empty() || g.size() > q::kMaxGroupId || !printable)
      refuse(fmt::format("--to-group '{}': use 1 to {} printable ASCII characters, no spaces",
                         g.substr(0, 200), q::kMaxGroupId));
  }
  stage.to = o.to;
  stage.lines = o.to_lines;
  stage.max_bytes = o.to_max_bytes.value_or(target.max_size);
  stage.attributes = o.to_attributes;
  stage.group = o.to_group;
  return stage;
}

work::PolicyOptions policy_options(const WorkOptions& o, const std::string& program,
                                   Millis idempotency_window) {
  work::PolicyOptions p;
  p.queue = o.queue;
  p.program = program;
  p.backoff_base = o.backoff_base;
  p.backoff_cap = o.backoff_cap;
  p.grace = o.grace;
  p.timeout = o.timeout;
  p.idempotency_window = idempotency_window;
  return p;
}

class Worker {
 public:
  Worker(q::Broker& broker, const q::Clock& clock, const WorkOptions& options)
      : broker_(broker),
        clock_(clock),
        o_(options),
        local_rate_(options.rate),
        progress_(o_.queue, o_.quiet, isatty(STDERR_FILENO)) {
    auto config = broker_.configure(o_.queue, {});
    visibility_ = o_.visibility_timeout.value_or(config.visibility_timeout);
    if (visibility_ < kMinWorkVisibility) {
      // Only the queue's own setting can be this short (the flag is checked):
      // q work cannot refuse to consume the queue, so it leases longer.
      progress_.note(fmt::format(
          "queue {}: its visibility timeout {} is too short for a "
          "heartbeat; leasing messages for {} instead",
          o_.queue, q::format_duration(visibility_), q::format_duration(kMinWorkVisibility)));
      visibility_ = kMinWorkVisibility;
    }
    // Extend well before the lease runs out: at a third of it.
    heartbeat_every_ = std::max<Millis>(visibility_ / 3, 100);
    program_ = work::find_program(o_.command.at(0));
    args_.assign(o_.command.begin() + 1, o_.command.end());
    auto policy = policy_options(o_, program_, o_.idempotency_window.value_or(config.retention));
    policy.stage = stage_options(broker_, o_, config);
    policy_.emplace(broker_, clock_, std::move(policy));
  }

  int run() {
    work::install_signals();
    work::close_on_exec_everything();
    // Inherited by every command and what it starts (not close-on-exec): while
    // any of them runs, this runner's leases are not released as "holder
    // died", also after a kill -9 of q work (issue 25 item 9).
    self_ = q::find_holder(static_cast<std::uint32_t>(::getpid()));
    // On a cluster a helper process answers for this runner while it or any
    // of its commands runs (the same rule; libq/nats/nats_holders.hpp).
    if (self_) q::hold_descendants(o_.queue_file, *self_);
    if (self_) broker_.announce_holder(*self_, true);
    watch_ = broker_.watch();
    started_at_ = work::steady_now();
    register_command();
    for (;;) {
      Millis now = work::steady_now();
      handle_signals(now);
      if (stop_now_) break;
      reap_children();
      settle_exited();
      pause_if_tripped();
      beat_and_time_out(now);
      if (stopping_ && busy() == 0) break;
      if (stopping_ && now >= stop_deadline_) stop_unfinished(now);
      bool took = take_messages(now);
      if (!took && o_.exit_when_empty && busy() == 0 && !queue_has_visible()) break;
      if (max_reached() && busy() == 0) break;
      if (took) continue;  // there may be more right away
      draw_progress(now, false);
      wait_for_events(now);
    }
    if (tripped_ && !trip_paused_ && !broker_.stats(o_.queue).at(0).pause)
      broker_.pause(o_.queue, 0, trip_reason_);
    progress_.finish(counts_, work::steady_now() - started_at_);
    unregister_command();
    // Stopped by a signal: a clean stop, whatever failed before it (a service
    // manager must not count it as a failure). Otherwise say if anything failed.
    if (tripped_) return kTripped;
    if (stopped_by_signal_) return 0;
    return counts_.failed + counts_.dead_lettered > 0 ? kSomeFailed : 0;
  }

 private:
  // --trip: N failures within DUR pause the queue (a downstream is down:
  // retrying every message only moves them all towards the dead-letter queue)
  // and stop this runner as SIGTERM would; an operator resumes the queue.
  void count_failure(const std::string& what) {
    if (!o_.trip || tripped_) return;
    Millis now = work::steady_now();
    recent_failures_.push_back(now);
    while (!recent_failures_.empty() && recent_failures_.front() <= now - o_.trip->within)
      recent_failures_.pop_front();
    if (recent_failures_.size() < o_.trip->failures) return;
    std::string reason = fmt::format("q work --trip {}/{}: {} within {} (last: {})",
                                     o_.trip->failures, q::format_duration(o_.trip->within),
                                     q::plural(recent_failures_.size(), "failure"),
                                     q::format_duration(o_.trip->within), what);
    // Paused by the main loop (pause_if_tripped): this runs inside an
    // operation that a busy writer lock would repeat.
    trip_reason_ = reason;
    tripped_ = true;
    if (!stopping_) {
      stopping_ = true;
      stop_deadline_ = now + o_.grace;
    }
  }

  void pause_if_tripped() {
    if (!tripped_ || trip_paused_) return;
    // An operator's pause in place (a maintenance window, with its end and
    // reason) is kept, not replaced by "until q resume" (issue 25 item 12).
    if (auto in_place = broker_.stats(o_.queue).at(0).pause) {
      trip_paused_ = true;
      progress_.note(
          fmt::format("queue {}: {}; left as it is ({})", o_.queue,
                      in_place->until == 0
                          ? std::string("already paused until 'q resume'")
                          : fmt::format("already paused until {}", q::format_time(in_place->until)),
                      trip_reason_));
      return;
    }
    if (!with_lock([&] { broker_.pause(o_.queue, 0, trip_reason_); })) return;
    trip_paused_ = true;
    progress_.note(fmt::format("queue {}: paused ({}); resume it with 'q resume {}'", o_.queue,
                               trip_reason_, o_.queue));
  }

  // The command line goes into the file once, for `q show` (its attempt history
  // names each delivery's pid and start time, not the command).
  void register_command() {
    std::string line;
    for (const auto& arg : o_.command) {
      if (!line.empty()) line.push_back(' ');
      bool plain = !arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
      if (plain) {
        line += arg;
        continue;
      }
      line.push_back('\'');
      for (char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line.push_back('\'');
    }
    Millis since = clock_.now();
    if (with_lock(
            [&] { broker_.register_worker(static_cast<std::uint32_t>(::getpid()), since, line); }))
      registered_since_ = since;
  }

  void unregister_command() {
    if (registered_since_ == 0) return;
    try {
      broker_.unregister_worker(static_cast<std::uint32_t>(::getpid()), registered_since_);
    } catch (const q::Error&) {
      // A stale entry is dropped by the next q work that registers.
    }
  }

  // Commands running, and commands ended whose outcome is not yet recorded.
  std::size_t busy() const { return jobs_.size() + exited_.size(); }

  // ---- the writer lock ----------------------------------------------------------
  // Another process may hold the writer lock longer than --lock-timeout (a huge
  // send, a stopped q). q work is long-running: it never gives up its
  // commands over it. An operation that met a busy lock is tried again on a
  // later turn of the loop, which meanwhile reaps, times out and stops
  // commands as usual; the wait is reported on stderr.

  // Runs `op` (a write); false if the writer lock was busy.
  template <class Op>
  bool with_lock(Op&& op) {
    const Millis began = work::steady_now();
    try {
      op();
    } catch (const q::Error& e) {
      if (e.kind() != q::ErrorKind::Busy) throw;
      Millis now = work::steady_now();
      if (lock_wait_since_ == 0) lock_wait_since_ = began;
      progress_.note(fmt::format("{}; still waiting for it ({} so far), running commands go on",
                                 e.what(),
                                 q::format_duration((now - lock_wait_since_) / 100 * 100)));
      return false;
    }
    if (lock_wait_since_ != 0) {
      progress_.note(
          fmt::format("got the writer lock after {}",
                      q::format_duration((work::steady_now() - lock_wait_since_) / 100 * 100)));
      lock_wait_since_ = 0;
    }
    return true;
  }

  // ---- taking work ------------------------------------------------------------

  bool max_reached() const { return o_.max_messages && taken_ >= *o_.max_messages; }

  // How many messages to take now; `acking` of the ended jobs are acked in
  // the same round and leave room.
  std::uint64_t capacity(Millis now, std::size_t acking = 0) const {
    std::size_t busy_after = busy() - acking;
    if (stopping_ || max_reached() || busy_after >= o_.concurrency) return 0;
    std::uint64_t n = o_.concurrency - busy_after;
    if (o_.max_messages) n = std::min(n, *o_.max_messages - taken_);
    return std::min(n, local_rate_.allows(now));
  }

  // When the next message is ready (Broker::next_delivery); a cluster that
  // does not answer is a wait like a busy lock: reported, asked again a
  // second later (INT64_MIN + 1: unknown), never the end of q work.
  Millis next_delivery(bool rate_limited) {
    Millis next = INT64_MIN + 1;
    if (!with_lock([&] { next = broker_.next_delivery(o_.queue, rate_limited); }))
      return INT64_MIN + 1;
    return next;
  }
  static constexpr Millis kUnknown = INT64_MIN + 1;

  // Unknown counts as visible: q work --exit-when-empty does not end on it.
  bool queue_has_visible() {
    Millis next = next_delivery(false);
    return next == kUnknown || next <= clock_.now();
  }

  // One round, one write transaction: acks every plain success (and idempotent
  // repeat) that ended since the last round and takes as many messages as
  // there will be room for, then starts their commands. Returns true when it
  // acked or took anything (there may be more right away).
  bool take_messages(Millis now) {
    std::vector<std::string> acks;
    for (const auto& job : exited_)
      if (acks_together(job)) acks.push_back(job.message.receipt);
    // The jobs acked now make room in this very round.
    auto n = capacity(now, acks.size());
    if (n == 0 && acks.empty()) return false;
    // Nothing to ack and nothing ready: look without the writer lock.
    if (acks.empty()) {
      Millis next = next_delivery(true);
      if (next == kUnknown || next > clock_.now()) return false;
    }
    q::ReceiveOptions options;
    options.max_messages = static_cast<std::uint32_t>(n);
    options.visibility_timeout = visibility_;
    options.rate_limited = true;
    options.one_per_group = true;  // FIFO: never two messages of one group at once
    // Held by this process: if it dies, its messages go to another worker at once.
    options.holder = self_;
    options.holder_pid = static_cast<std::uint32_t>(::getpid());
    options.worker_since = registered_since_;
    work::OutcomePolicy::Round round;
    if (!with_lock([&] { round = policy_->ack_and_take(acks, options); })) return false;
    if (!acks.empty()) {
      for (const auto& line : round.notes) progress_.note(line);
      for (const auto& job : exited_)
        if (acks_together(job)) count(job.skip ? work::Tally::Skipped : work::Tally::Done);
      exited_.erase(std::remove_if(exited_.begin(), exited_.end(),
                                   [&](const Job& job) { return acks_together(job); }),
                    exited_.end());
    }
    for (auto& m : round.taken) {
      if (adopt_redelivery(m)) continue;
      ++taken_;
      local_rate_.take(now);
      std::string key = idempotency_key(m);
      if (!key.empty() && broker_.is_done(o_.queue, key)) {
        Job skipped;
        skipped.message = std::move(m);
        skipped.skip = true;
        exited_.push_back(std::move(skipped));  // acked by the next round
        continue;
      }
      start(std::move(m), std::move(key), now);
    }
    return !acks.empty() || !round.taken.empty();
  }

  // A message this runner still runs (or has yet to settle) came back: its
  // lease ran out before a heartbeat could extend it (the writer lock was held
  // too long, or q work was stopped). The running command keeps it under the
  // new receipt; it is never started a second time.
  bool adopt_redelivery(const q::Message& m) {
    auto adopt = [&](Job& job) {
      progress_.note(
          fmt::format("message {}: its lease ran out while its command ran; this "
                      "runner took it again and keeps the one run (raise "
                      "--visibility-timeout?)",
                      m.id));
      job.message.receipt = m.receipt;
      job.message.receive_count = m.receive_count;
      job.lease_lost = false;
    };
    for (auto& [pid, job] : jobs_)
      if (job.message.id == m.id) return adopt(job), true;
    for (auto& job : exited_)
      if (job.message.id == m.id) return adopt(job), true;
    return false;
  }

  // Only with --idempotency-key ATTR: the attribute's value, or the dedup id
  // of a message without that attribute. Never by default: a message re-sent
  // on purpose with an old dedup id must not be skipped unasked.
  std::string idempotency_key(const q::Message& m) const {
    if (o_.idempotency_attribute.empty()) return {};
    std::string key = m.dedup_id;
    for (const auto& [k, v] : m.attributes)
      if (k == o_.idempotency_attribute) key = v;
    if (key.size() > q::kMaxIdempotencyKey) {
      progress_.note(fmt::format("message {}: idempotency key longer than {} bytes, not used", m.id,
                                 q::kMaxIdempotencyKey));
      return {};
    }
    return key;
  }

  // ---- running and reaping commands ------------------------------------------------

  bool stage() const { return !policy_->options().stage.to.empty(); }

  void start(q::Message m, std::string key, Millis now) {
    Job job;
    int output_write = -1;
    if (stage()) job.output_fd = work::output_pipe(output_write);
    try {
      job.child = work::spawn(program_, args_, work::environment(m, o_.queue, o_.queue_file),
                              m.body, output_write);
    } catch (...) {
      if (output_write >= 0) ::close(output_write), ::close(job.output_fd);
      throw;
    }
    if (output_write >= 0) ::close(output_write);
    job.ending.exec_errno = job.child.exec_errno;
    job.message = std::move(m);
    job.key = std::move(key);
    job.next_heartbeat = now + heartbeat_every_;  // the lease counts from the receive
    // The timeout counts from the start: not from before a wait for the lock.
    if (o_.timeout) job.deadline = job.child.forked + *o_.timeout;
    pid_t pid = job.child.pid;
    jobs_.emplace(pid, std::move(job));
  }

  void read_stderr(Job& job) {
    work::pump_stderr(job.child.stderr_fd, job.ending.stderr_tail, job.ending.stderr_head,
                      [this] { progress_.clear(); });
  }

  // Moves every command that has ended to exited_, to be settled.
  void reap_children() {
    work::Reaped reaped;
    while (work::reap_one(reaped)) {
      auto it = jobs_.find(reaped.pid);
      if (it == jobs_.end()) continue;
      Job& job = it->second;
      if (job.child.stderr_fd >= 0) read_stderr(job);
      if (job.child.stderr_fd >= 0) ::close(job.child.stderr_fd);
      job.child.stderr_fd = -1;
      job.ending.status = reaped.status;
      collect_output(job);
      exited_.push_back(std::move(job));
      jobs_.erase(it);
    }
  }

  // --to: what the command that ended wrote before it exited (a process it
  // left running that writes later is not waited for).
  void collect_output(Job& job) {
    read_output(job, false);
    if (job.output_fd >= 0) ::close(job.output_fd);
    job.output_fd = -1;
  }

  // --to: the command's output as it comes, never more than --to-max-bytes in
  // memory: a command writing past it is stopped at once (its run has failed).
  void read_output(Job& job, bool running = true) {
    if (job.output_fd < 0) return;
    if (work::pump_output(job.output_fd, job.ending.output, policy_->options().stage.max_bytes))
      return;
    job.ending.output_over_limit = true;
    if (running) ::kill(-job.child.pid, SIGKILL);  // (a reaped one's pid may be another's now)
  }

  // ---- outcomes -----------------------------------------------------------------------

  void count(work::Tally tally) {
    switch (tally) {
      case work::Tally::Done: ++counts_.done; break;
      case work::Tally::Failed: ++counts_.failed; break;
      case work::Tally::DeadLettered: ++counts_.dead_lettered; break;
      case work::Tally::Released: ++counts_.released; break;
      case work::Tally::Skipped: ++counts_.skipped; break;
      case work::Tally::None: break;
    }
  }

  bool acks_together(const Job& job) const {
    return job.skip || policy_->plain_ack(job.ending, job.key);
  }

  // Records the outcome of every ended command that is not a plain ack (those
  // are acked by the next round, take_messages), one transaction each. What
  // meets a busy writer lock stays in exited_ for the next turn.
  void settle_exited() {
    for (auto it = exited_.begin(); it != exited_.end();) {
      if (acks_together(*it)) {
        ++it;
        continue;
      }
      const Job& job = *it;
      work::Settled settled;
      if (!with_lock([&] { settled = policy_->settle(job.message, job.key, job.ending); })) return;
      count(settled.tally);
      if (!settled.note.empty()) progress_.note(settled.note);
      if (settled.tally == work::Tally::Failed || settled.tally == work::Tally::DeadLettered)
        count_failure(work::judge(job.ending, policy_->options()).what);
      it = exited_.erase(it);
    }
  }

  void beat_and_time_out(Millis now) {
    for (auto& [pid, job] : jobs_) {
      if (now >= job.kill_at) {
        ::kill(-job.child.pid, SIGKILL);
        job.kill_at = INT64_MAX;
      } else if (now >= job.deadline) {
        ::kill(-job.child.pid, SIGTERM);
        job.ending.timed_out = true;
        job.deadline = INT64_MAX;
        job.kill_at = now + o_.kill_after;
      }
    }
    // The lease is kept while the command runs, also after a SIGTERM: its
    // message must not reach another consumer before the command has exited.
    for (auto& [pid, job] : jobs_) {
      if (now < job.next_heartbeat || job.lease_lost) continue;
      q::ReceiptResult beat;
      if (!with_lock([&] { beat = policy_->heartbeat(job.message.receipt, visibility_); }))
        return;  // the lock is busy for every job alike: next turn
      if (beat.outcome != q::ReceiptOutcome::Done) {
        job.lease_lost = true;
        progress_.note(
            fmt::format("message {}: heartbeat failed: {}", job.message.id, beat.detail));
      }
      job.next_heartbeat = now + heartbeat_every_;
    }
  }

  // ---- stopping -----------------------------------------------------------------------

  void handle_signals(Millis now) {
    if (work::stop_signals() == 0) return;
    stopped_by_signal_ = true;
    if (work::stop_signals() >= 2) {
      // Stop at once: the messages come back when their leases run out (a
      // command may still run: its message is not released under it).
      for (auto& [pid, job] : jobs_) ::kill(-job.child.pid, SIGTERM);
      stop_now_ = true;
      return;
    }
    if (!stopping_) {
      stopping_ = true;
      stop_deadline_ = now + o_.grace;
      if (!jobs_.empty())
        progress_.note(fmt::format("stopping: waiting up to {} for {} running command(s)",
                                   q::format_duration(o_.grace), jobs_.size()));
    }
  }

  // Past --grace: SIGTERM the commands still running, SIGKILL --kill-after
  // later; each message is released once its command has exited (settle).
  void stop_unfinished(Millis now) {
    for (auto& [pid, job] : jobs_) {
      if (job.ending.stopped) continue;
      ::kill(-job.child.pid, SIGTERM);
      job.ending.stopped = true;
      job.deadline = INT64_MAX;
      job.kill_at = std::min(job.kill_at, now + o_.kill_after);
    }
  }

  // ---- waiting --------------------------------------------------------------------------

  void wait_for_events(Millis now) {
    Millis until = now + 1000;  // redraw progress; also covers a missing inotify
    if (stopping_ && stop_deadline_ > now) until = std::min(until, stop_deadline_);
    if (!exited_.empty()) until = now;  // outcomes to record (the lock was busy)
    for (const auto& [pid, job] : jobs_)
      until = std::min({until, job.next_heartbeat, job.deadline, job.kill_at});
    bool want_messages = capacity(now) > 0 || (local_rate_.limited() && !stopping_ &&
                                               busy() < o_.concurrency && !max_reached());
    if (want_messages) {
      Millis wall_now = clock_.now();
      Millis next = next_delivery(true);
      // next is INT64_MIN when a message is ready: no subtraction from it.
      if (next == kUnknown)
        until = std::min(until, now + 1000);
      else if (next <= wall_now)
        until = now;
      else if (next != INT64_MAX)
        until = std::min(until, now + (next - wall_now));
      if (local_rate_.limited()) until = std::min(until, std::max(now, local_rate_.ready_at(now)));
    }
    std::vector<pollfd> fds;
    fds.push_back({work::wake_fd(), POLLIN, 0});
    if (want_messages && watch_->fd() >= 0) fds.push_back({watch_->fd(), POLLIN, 0});
    std::vector<Job*> readers, output_readers;
    for (auto& [pid, job] : jobs_)
      if (job.child.stderr_fd >= 0) {
        fds.push_back({job.child.stderr_fd, POLLIN, 0});
        readers.push_back(&job);
      }
    for (auto& [pid, job] : jobs_)
      if (job.output_fd >= 0) {
        fds.push_back({job.output_fd, POLLIN, 0});
        output_readers.push_back(&job);
      }
    int timeout = static_cast<int>(std::clamp<Millis>(until - now, 0, 1000));
    if (::poll(fds.data(), fds.size(), timeout) <= 0) return;
    if (fds[0].revents) work::drain_wake_pipe();
    std::size_t first_reader = 1;
    if (want_messages && watch_->fd() >= 0) {
      if (fds[1].revents) watch_->drain();
      first_reader = 2;
    }
    for (std::size_t i = 0; i < readers.size(); ++i)
      if (fds[first_reader + i].revents) read_stderr(*readers[i]);
    std::size_t first_output = first_reader + readers.size();
    for (std::size_t i = 0; i < output_readers.size(); ++i)
      if (fds[first_output + i].revents) read_output(*output_readers[i]);
  }

  void draw_progress(Millis now, bool force) {
    progress_.draw(
        now, counts_,
        [this] {
          // Not answered (a cluster slow to list): the last count stays.
          with_lock([&] {
            auto stats = broker_.stats(o_.queue).at(0);
            queued_ = stats.visible + stats.delayed + stats.in_flight;
          });
          return queued_;
        },
        force);
  }

  q::Broker& broker_;
  const q::Clock& clock_;
  const WorkOptions& o_;
  std::string program_;  // the command's path, looked up in PATH once
  std::vector<std::string> args_;
  q::RateLimiter local_rate_;  // --rate: starts of this process, no burst
  work::Progress progress_;
  std::optional<work::OutcomePolicy> policy_;
  Millis visibility_ = 0;
  Millis heartbeat_every_ = 0;
  std::unique_ptr<q::ChangeWatch> watch_;
  std::optional<q::Holder> self_;  // this process, the holder of its leases
  std::uint64_t queued_ = 0;       // the progress line's last count of the queue
  std::map<pid_t, Job> jobs_;
  std::deque<Job> exited_;      // ended (or skipped), outcome not yet recorded
  Millis lock_wait_since_ = 0;  // waiting for the writer lock since (steady), or 0
  bool stopping_ = false, stop_now_ = false, stopped_by_signal_ = false;
  Millis stop_deadline_ = INT64_MAX;
  std::uint64_t taken_ = 0;
  work::Counts counts_;
  Millis started_at_ = 0;
  Millis registered_since_ = 0;  // registry key with our pid; 0: not registered
  bool tripped_ = false, trip_paused_ = false;
  std::string trip_reason_;
  std::deque<Millis> recent_failures_;
};

}  // namespace

int run_worker(q::Broker& broker, const q::Clock& clock, const WorkOptions& options) {
  Worker worker(broker, clock, options);
  return worker.run();
}

}  // namespace cli
