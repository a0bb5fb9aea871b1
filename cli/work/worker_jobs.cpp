// The q work runner: taking messages, running and reaping their commands,
// and recording how each ended.
#include "cli/work/worker_impl.hpp"

namespace cli::work {

std::uint64_t Worker::capacity(Millis now, std::size_t acking) const {
  std::size_t busy_after = busy() - acking;
  if (stopping_ || max_reached() || busy_after >= o_.concurrency) return 0;
  std::uint64_t n = o_.concurrency - busy_after;
  if (o_.max_messages) n = std::min(n, *o_.max_messages - taken_);
  return std::min(n, local_rate_.allows(now));
}

Millis Worker::next_delivery(bool rate_limited) {
  Millis next = INT64_MIN + 1;
  if (!with_lock([&] { next = broker_.next_delivery(o_.queue, rate_limited); }))
    return INT64_MIN + 1;
  return next;
}

bool Worker::queue_has_visible() {
  Millis next = next_delivery(false);
  return next == kUnknown || next <= clock_.now();
}

bool Worker::take_messages(Millis now) {
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
  options.sync_later = true;  // synced below, while the commands it starts run
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
  // Only after a commit: a round that lost its messages to another worker
  // committed nothing, and a sync then would be a wasted fdatasync.
  const bool committed = !acks.empty() || !round.taken.empty();
  if (committed) broker_.sync();
  return committed;
}

bool Worker::adopt_redelivery(const q::Message& m) {
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

std::string Worker::idempotency_key(const q::Message& m) const {
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

void Worker::start(q::Message m, std::string key, Millis now) {
  Job job;
  int output_write = -1;
  if (stage()) job.output_fd = work::output_pipe(output_write);
  try {
    job.child = work::spawn(program_, args_, work::environment(m, o_.queue, o_.queue_file), m.body,
                            output_write);
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

void Worker::read_stderr(Job& job) {
  work::pump_stderr(job.child.stderr_fd, job.ending.stderr_tail, job.ending.stderr_head,
                    [this] { progress_.clear(); });
}

void Worker::reap_children() {
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

void Worker::collect_output(Job& job) {
  read_output(job, false);
  if (job.output_fd >= 0) ::close(job.output_fd);
  job.output_fd = -1;
}

void Worker::read_output(Job& job, bool running) {
  if (job.output_fd < 0) return;
  if (work::pump_output(job.output_fd, job.ending.output, policy_->options().stage.max_bytes))
    return;
  job.ending.output_over_limit = true;
  if (running) ::kill(-job.child.pid, SIGKILL);  // (a reaped one's pid may be another's now)
}

void Worker::count(work::Tally tally) {
  switch (tally) {
    case work::Tally::Done: ++counts_.done; break;
    case work::Tally::Failed: ++counts_.failed; break;
    case work::Tally::DeadLettered: ++counts_.dead_lettered; break;
    case work::Tally::Released: ++counts_.released; break;
    case work::Tally::Skipped: ++counts_.skipped; break;
    case work::Tally::None: break;
  }
}

bool Worker::acks_together(const Job& job) const {
  return job.skip || policy_->plain_ack(job.ending, job.key);
}

void Worker::settle_exited() {
  if (stage() && !pass_on_exited()) return;
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

bool Worker::pass_on_exited() {
  std::vector<work::OutcomePolicy::Run> runs;
  std::vector<std::size_t> at;  // where each run's job is in exited_
  for (std::size_t i = 0; i < exited_.size(); ++i)
    if (!acks_together(exited_[i]) && policy_->passes_on(exited_[i].ending)) {
      runs.push_back({&exited_[i].message, &exited_[i].ending});
      at.push_back(i);
    }
  if (runs.empty()) return true;
  std::vector<work::Settled> settled;
  if (!with_lock([&] { settled = policy_->pass_on_each(runs); })) return false;
  for (const auto& one : settled) {
    count(one.tally);
    if (!one.note.empty()) progress_.note(one.note);
    if (one.tally == work::Tally::Failed || one.tally == work::Tally::DeadLettered)
      count_failure(one.note);
  }
  for (std::size_t k = settled.size(); k-- > 0;) exited_.erase(exited_.begin() + at[k]);
  return settled.size() == runs.size();
}

void Worker::beat_and_time_out(Millis now) {
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
      progress_.note(fmt::format("message {}: heartbeat failed: {}", job.message.id, beat.detail));
    }
    job.next_heartbeat = now + heartbeat_every_;
  }
}

}  // namespace cli::work
