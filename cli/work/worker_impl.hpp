// Internal to cli/work: the q work runner, shared by worker.cpp (its run:
// signals, the writer lock, stopping, waiting, progress) and worker_jobs.cpp
// (taking messages, running and reaping commands, their outcomes).
#pragma once

#include "cli/work/worker.hpp"

#include <signal.h>
#include <unistd.h>
#include <poll.h>

#include <algorithm>
#include <deque>
#include <map>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/files.hpp"
#include "libq/descendants.hpp"
#include "libq/holder.hpp"
#include "cli/work/stop_signals.hpp"
#include "cli/output.hpp"
#include "libq/rate_limiter.hpp"
#include "libq/timefmt.hpp"
#include "cli/work/worker_child.hpp"
#include "cli/work/worker_policy.hpp"
#include "cli/work/worker_progress.hpp"

namespace cli::work {

using q::Millis;

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

class Worker {
 public:
  Worker(q::Broker& broker, const q::Clock& clock, const WorkOptions& options);

  int run();

 private:
  // --trip: N failures within DUR pause the queue (a downstream is down:
  // retrying every message only moves them all towards the dead-letter queue)
  // and stop this runner as SIGTERM would; an operator resumes the queue.
  void count_failure(const std::string& what);

  void pause_if_tripped();

  // The command line goes into the file once, for `q show` (its attempt history
  // names each delivery's pid and start time, not the command).
  void register_command();

  void unregister_command();

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
  std::uint64_t capacity(Millis now, std::size_t acking = 0) const;

  // When the next message is ready (Broker::next_delivery); a cluster that
  // does not answer is a wait like a busy lock: reported, asked again a
  // second later (INT64_MIN + 1: unknown), never the end of q work.
  Millis next_delivery(bool rate_limited);
  static constexpr Millis kUnknown = INT64_MIN + 1;

  // Unknown counts as visible: q work --exit-when-empty does not end on it.
  bool queue_has_visible();

  // One round, one write transaction: acks every plain success (and idempotent
  // repeat) that ended since the last round and takes as many messages as
  // there will be room for, then starts their commands. Returns true when it
  // acked or took anything (there may be more right away).
  bool take_messages(Millis now);

  // A message this runner still runs (or has yet to settle) came back: its
  // lease ran out before a heartbeat could extend it (the writer lock was held
  // too long, or q work was stopped). The running command keeps it under the
  // new receipt; it is never started a second time.
  bool adopt_redelivery(const q::Message& m);

  // Only with --idempotency-key ATTR: the attribute's value, or the dedup id
  // of a message without that attribute. Never by default: a message re-sent
  // on purpose with an old dedup id must not be skipped unasked.
  std::string idempotency_key(const q::Message& m) const;

  // ---- running and reaping commands ------------------------------------------------

  bool stage() const { return !policy_->options().stage.to.empty(); }

  void start(q::Message m, std::string key, Millis now);

  void read_stderr(Job& job);

  // Moves every command that has ended to exited_, to be settled.
  void reap_children();

  // --to: what the command that ended wrote before it exited (a process it
  // left running that writes later is not waited for).
  void collect_output(Job& job);

  // --to: the command's output as it comes, never more than --to-max-bytes in
  // memory: a command writing past it is stopped at once (its run has failed).
  void read_output(Job& job, bool running = true);

  // ---- outcomes -----------------------------------------------------------------------

  void count(work::Tally tally);

  bool acks_together(const Job& job) const;

  // Records the outcome of every ended command that is not a plain ack (those
  // are acked by the next round, take_messages), one transaction each. What
  // meets a busy writer lock stays in exited_ for the next turn.
  void settle_exited();

  // --to: the outputs and acks of every successful run that ended, in one
  // transaction (OutcomePolicy::pass_on_each). False when some are left for
  // the next turn (the writer lock was busy).
  bool pass_on_exited();

  void beat_and_time_out(Millis now);

  // ---- stopping -----------------------------------------------------------------------

  void handle_signals(Millis now);

  // Past --grace: SIGTERM the commands still running, SIGKILL --kill-after
  // later; each message is released once its command has exited (settle).
  void stop_unfinished(Millis now);

  // ---- waiting --------------------------------------------------------------------------

  void wait_for_events(Millis now);

  void draw_progress(Millis now, bool force);

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

}  // namespace cli::work
