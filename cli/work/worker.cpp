#include "cli/work/worker_impl.hpp"

namespace cli {
namespace {

using q::Millis;

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

}  // namespace

namespace work {

Worker::Worker(q::Broker& broker, const q::Clock& clock, const WorkOptions& options)
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

int Worker::run() {
  work::install_signals();
  work::close_on_exec_everything();
  // Inherited by every command and what it starts (not close-on-exec): while
  // any of them runs, this runner's leases are not released as "holder
  // died", also after a kill -9 of q work (issue 25 item 9).
  self_ = q::find_holder(static_cast<std::uint32_t>(::getpid()));
  // On a cluster a helper process answers for this runner while it or any
  // of its commands runs (the same rule; libq/nats/holders.hpp).
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

void Worker::count_failure(const std::string& what) {
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

void Worker::pause_if_tripped() {
  if (!tripped_ || trip_paused_) return;
  // An operator's pause in place (a maintenance window, with its end and
  // reason) is kept, not replaced by "until q resume" (issue 25 item 12).
  if (auto in_place = broker_.stats(o_.queue).at(0).pause) {
    trip_paused_ = true;
    progress_.note(fmt::format("queue {}: {}; left as it is ({})", o_.queue,
                               in_place->until == 0 ? std::string("already paused until 'q resume'")
                                                    : fmt::format("already paused until {}",
                                                                  q::format_time(in_place->until)),
                               trip_reason_));
    return;
  }
  if (!with_lock([&] { broker_.pause(o_.queue, 0, trip_reason_); })) return;
  trip_paused_ = true;
  progress_.note(fmt::format("queue {}: paused ({}); resume it with 'q resume {}'", o_.queue,
                             trip_reason_, o_.queue));
}

void Worker::register_command() {
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

void Worker::unregister_command() {
  if (registered_since_ == 0) return;
  try {
    broker_.unregister_worker(static_cast<std::uint32_t>(::getpid()), registered_since_);
  } catch (const q::Error&) {
    // A stale entry is dropped by the next q work that registers.
  }
}

void Worker::handle_signals(Millis now) {
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

void Worker::stop_unfinished(Millis now) {
  for (auto& [pid, job] : jobs_) {
    if (job.ending.stopped) continue;
    ::kill(-job.child.pid, SIGTERM);
    job.ending.stopped = true;
    job.deadline = INT64_MAX;
    job.kill_at = std::min(job.kill_at, now + o_.kill_after);
  }
}

void Worker::wait_for_events(Millis now) {
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

void Worker::draw_progress(Millis now, bool force) {
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

}  // namespace work

int run_worker(q::Broker& broker, const q::Clock& clock, const WorkOptions& options) {
  work::Worker worker(broker, clock, options);
  return worker.run();
}

}  // namespace cli
