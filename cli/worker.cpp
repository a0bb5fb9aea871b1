#include "worker.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <map>

#include <fmt/format.h>

#include "error.hpp"
#include "timefmt.hpp"

extern char** environ;

namespace cli {
namespace {

using q::Millis;

// ---- signals: the handlers only count and wake the loop ------------------------

int g_wake_pipe[2] = {-1, -1};
volatile sig_atomic_t g_stop_signals = 0;

void on_signal(int signo) {
  int saved = errno;
  if (signo == SIGTERM || signo == SIGINT) g_stop_signals = g_stop_signals + 1;
  char byte = 0;
  [[maybe_unused]] auto n = ::write(g_wake_pipe[1], &byte, 1);
  errno = saved;
}

void install_signals() {
  if (::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw q::Error(q::ErrorKind::Io, fmt::format("cannot create pipe: {}", std::strerror(errno)));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
}

void drain_wake_pipe() {
  char buf[256];
  while (::read(g_wake_pipe[0], buf, sizeof buf) > 0) {
  }
}

// LMDB's descriptors are not close-on-exec; a command must not inherit them
// (nor our lock descriptor, which would keep the writer lock alive with it).
void close_on_exec_everything() {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  int self = dirfd(dir);
  while (auto* entry = readdir(dir)) {
    int fd = std::atoi(entry->d_name);
    if (fd > 2 && fd != self) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
  closedir(dir);
}

// The path execve needs, looked up once rather than per message.
std::string find_program(const std::string& name) {
  auto missing = [&](const char* why) {
    return q::Error(q::ErrorKind::Usage, fmt::format("command '{}': {}", name, why));
  };
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (!runnable(name)) throw missing("not found or not executable");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (runnable(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  throw missing("not found in PATH");
}

Millis steady_now() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// The environment variable name for attribute `key`: Q_ATTR_ and the key upper-
// cased, anything but letters and digits as '_'.
std::string attribute_variable(const std::string& key) {
  std::string name = "Q_ATTR_";
  for (unsigned char c : key) name.push_back(std::isalnum(c) ? static_cast<char>(std::toupper(c)) : '_');
  return name;
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signo);
}

// One start every 1/rate seconds (GCRA without burst), for --rate per process.
class LocalRate {
 public:
  explicit LocalRate(double rate) : interval_ms_(rate > 0 ? 1000.0 / rate : 0) {}
  bool limited() const { return interval_ms_ > 0; }
  std::uint64_t allows(Millis now) const {
    if (!limited()) return UINT64_MAX;
    return tat_ <= static_cast<double>(now) ? 1 : 0;
  }
  void take(Millis now) {
    if (limited()) tat_ = std::max(tat_, static_cast<double>(now)) + interval_ms_;
  }
  Millis ready_at() const { return limited() ? static_cast<Millis>(std::ceil(tat_)) : INT64_MIN; }

 private:
  double interval_ms_;
  double tat_ = 0;
};

struct Job {
  q::Message message;
  std::string key;  // idempotency key; empty: none
  pid_t pid = -1;
  int stderr_fd = -1;
  std::string stderr_tail;
  Millis started = 0;
  Millis next_heartbeat = 0;
  Millis deadline = INT64_MAX;  // --timeout: SIGTERM
  Millis kill_at = INT64_MAX;   // SIGKILL after the SIGTERM
  bool timed_out = false;
  bool lease_lost = false;
};

class Worker {
 public:
  Worker(q::Broker& broker, const WorkOptions& options)
      : broker_(broker), o_(options), local_rate_(options.rate) {
    auto config = broker_.configure(o_.queue, {});
    visibility_ = o_.visibility_timeout.value_or(config.visibility_timeout);
    idempotency_window_ = o_.idempotency_window.value_or(config.retention);
    // Extend well before the lease runs out: at a third of it.
    heartbeat_every_ = std::max<Millis>(visibility_ / 3, 100);
    progress_ = !o_.quiet && isatty(STDERR_FILENO);
    program_ = find_program(o_.command.at(0));
  }

  int run() {
    install_signals();
    close_on_exec_everything();
    watch_ = broker_.watch();
    started_at_ = steady_now();
    for (;;) {
      Millis now = steady_now();
      handle_signals(now);
      if (stop_now_) break;
      reap_children();
      beat_and_time_out(now);
      if (stopping_ && jobs_.empty()) break;
      if (stopping_ && now >= stop_deadline_) {
        release_unfinished();
        break;
      }
      bool took = take_messages(now);
      if (!took && o_.exit_when_empty && jobs_.empty() && !queue_has_visible()) break;
      if (max_reached() && jobs_.empty()) break;
      if (took) continue;  // there may be more right away
      draw_progress(now, false);
      wait_for_events(now);
    }
    finish_progress();
    // Stopped by a signal: a clean stop, whatever failed before it (a service
    // manager must not count it as a failure). Otherwise say if anything failed.
    if (stopped_by_signal_) return 0;
    return failed_ + dead_lettered_ > 0 ? kSomeFailed : 0;
  }

 private:
  // ---- taking work ------------------------------------------------------------

  bool max_reached() const { return o_.max_messages && taken_ >= *o_.max_messages; }

  std::uint64_t capacity(Millis now) const {
    if (stopping_ || max_reached()) return 0;
    std::uint64_t n = o_.concurrency - jobs_.size();
    if (o_.max_messages) n = std::min(n, *o_.max_messages - taken_);
    return std::min(n, local_rate_.allows(now));
  }

  bool queue_has_visible() { return broker_.next_delivery(o_.queue, false) <= q::SystemClock().now(); }

  bool take_messages(Millis now) {
    auto n = capacity(now);
    if (n == 0) return false;
    if (broker_.next_delivery(o_.queue, true) > q::SystemClock().now()) return false;
    q::ReceiveOptions options;
    options.max_messages = static_cast<std::uint32_t>(n);
    options.visibility_timeout = visibility_;
    options.rate_limited = true;
    options.one_per_group = true;  // FIFO: never two messages of one group at once
    auto messages = broker_.receive(o_.queue, options);
    for (auto& m : messages) {
      ++taken_;
      local_rate_.take(now);
      std::string key = idempotency_key(m);
      if (!key.empty() && broker_.is_done(o_.queue, key)) {
        broker_.ack(o_.queue, {m.receipt});
        ++skipped_;
        continue;
      }
      start(std::move(m), std::move(key), now);
    }
    return !messages.empty();
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
      note(fmt::format("message {}: idempotency key longer than {} bytes, not used", m.id,
                       q::kMaxIdempotencyKey));
      return {};
    }
    return key;
  }

  // ---- running a command --------------------------------------------------------

  std::vector<std::string> environment(const q::Message& m) const {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view var(*e);
      if (var.substr(0, 7) == "Q_ATTR_") continue;  // only this message's attributes
      env.emplace_back(var);
    }
    env.push_back("Q_QUEUE=" + o_.queue);
    env.push_back("Q_FILE=" + o_.queue_file);
    env.push_back("Q_MESSAGE_ID=" + m.id);
    env.push_back("Q_RECEIPT=" + m.receipt);
    env.push_back(fmt::format("Q_RECEIVE_COUNT={}", m.receive_count));
    env.push_back("Q_SENT_AT=" + q::format_time(m.sent_at));
    for (const auto& [k, v] : m.attributes) env.push_back(attribute_variable(k) + "=" + v);
    return env;
  }

  void start(q::Message m, std::string key, Millis now) {
    // The body goes through a memory file, so a command that never reads its
    // stdin cannot block us.
    int body_fd = memfd_create("q-body", MFD_CLOEXEC);
    int err_pipe[2];
    if (body_fd < 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
      throw q::Error(q::ErrorKind::Io, fmt::format("cannot start command: {}", std::strerror(errno)));
    std::size_t done = 0;
    while (done < m.body.size()) {
      ssize_t w = ::write(body_fd, m.body.data() + done, m.body.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw q::Error(q::ErrorKind::Io, fmt::format("cannot pass the body: {}", std::strerror(errno)));
      done += static_cast<std::size_t>(w);
    }
    ::lseek(body_fd, 0, SEEK_SET);

    auto env_strings = environment(m);
    std::vector<char*> argv, envp;
    argv.push_back(const_cast<char*>(program_.c_str()));
    for (std::size_t i = 1; i < o_.command.size(); ++i)
      argv.push_back(const_cast<char*>(o_.command[i].c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t parent = getpid();

    pid_t pid = fork();
    if (pid < 0)
      throw q::Error(q::ErrorKind::Io, fmt::format("cannot fork: {}", std::strerror(errno)));
    if (pid == 0) {
      // Only async-signal-safe calls until exec; no LMDB here.
      setpgid(0, 0);  // our own group: a terminal's Ctrl-C is for q work to handle
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // the runner died: stop, the message comes back
      if (getppid() != parent) _exit(127);
      signal(SIGXFSZ, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      dup2(body_fd, STDIN_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      const char* msg = "q work: cannot run command\n";
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, std::strlen(msg));
      _exit(errno == ENOENT ? 127 : 126);
    }
    setpgid(pid, pid);
    ::close(body_fd);
    ::close(err_pipe[1]);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);

    Job job;
    job.message = std::move(m);
    job.key = std::move(key);
    job.pid = pid;
    job.stderr_fd = err_pipe[0];
    job.started = now;
    job.next_heartbeat = now + heartbeat_every_;
    if (o_.timeout) job.deadline = now + *o_.timeout;
    jobs_.emplace(pid, std::move(job));
  }

  void read_stderr(Job& job) {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(job.stderr_fd, buf, sizeof buf);
      if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          ::close(job.stderr_fd);
          job.stderr_fd = -1;
        }
        if (n < 0 && errno == EINTR) continue;
        return;
      }
      clear_progress();
      [[maybe_unused]] auto w = ::write(STDERR_FILENO, buf, static_cast<std::size_t>(n));
      job.stderr_tail.append(buf, static_cast<std::size_t>(n));
      if (job.stderr_tail.size() > 4096) job.stderr_tail.erase(0, job.stderr_tail.size() - 2048);
    }
  }

  // ---- outcomes -----------------------------------------------------------------------

  // Settles every command that has ended; plain acks of commands that ended
  // together share one transaction.
  void reap_children() {
    std::vector<std::string> acks;
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = jobs_.find(pid);
      if (it == jobs_.end()) continue;
      Job& job = it->second;
      if (job.stderr_fd >= 0) read_stderr(job);
      if (job.stderr_fd >= 0) ::close(job.stderr_fd);
      if (!job.timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0 && job.key.empty())
        acks.push_back(job.message.receipt);
      else
        finish(job, status);
      jobs_.erase(it);
    }
    if (acks.empty()) return;
    for (const auto& result : broker_.ack(o_.queue, acks))
      if (result.outcome != q::ReceiptOutcome::Done) lease_lost_at_ack(result.receipt);
    done_ += acks.size();
  }

  void lease_lost_at_ack(const std::string& receipt) const {
    note(fmt::format("receipt {}: done, but its lease was lost before the ack (another "
                     "consumer may run it again; raise the visibility timeout?)",
                     receipt));
  }

  // The last three lines the command wrote to stderr, for the reason.
  static std::string stderr_lines(const std::string& tail) {
    std::vector<std::string_view> lines;
    std::string_view rest(tail);
    while (!rest.empty()) {
      auto nl = rest.find('\n');
      auto line = rest.substr(0, nl);
      if (!line.empty() && line != "\r") lines.push_back(line);
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 1);
    }
    std::string text;
    for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i) {
      if (!text.empty()) text.push_back('\n');
      text.append(lines[i]);
    }
    if (text.size() > 1000) text = "..." + text.substr(text.size() - 1000);
    return text;
  }

  void finish(Job& job, int status) {
    std::string what;
    bool success = false, bad_message = false;
    if (job.timed_out) {
      what = fmt::format("timed out after {}", q::format_duration(*o_.timeout));
    } else if (WIFEXITED(status)) {
      int code = WEXITSTATUS(status);
      success = code == 0;
      bad_message = code == 65;
      what = fmt::format("exit status {}", code);
    } else if (WIFSIGNALED(status)) {
      what = fmt::format("killed by {}", signal_name(WTERMSIG(status)));
    }
    auto tail = stderr_lines(job.stderr_tail);
    std::string reason = tail.empty() ? what : what + ": " + tail;
    const auto& m = job.message;
    try {
      if (success) {
        if (broker_.ack_done(o_.queue, m.receipt, job.key, *idempotency_window_) !=
            q::ReceiptOutcome::Done)
          lease_lost_at_ack(m.receipt);
        ++done_;
      } else if (bad_message) {
        broker_.dead_letter(o_.queue, m.receipt, reason);
        ++dead_lettered_;
        note(fmt::format("message {}: dead-lettered ({})", m.id, what));
      } else {
        q::NackOptions nack;
        nack.backoff = true;
        nack.backoff_base = o_.backoff_base;
        nack.backoff_cap = o_.backoff_cap;
        nack.reason = reason.substr(0, q::kMaxReason);
        Millis at = broker_.nack(o_.queue, m.receipt, nack);
        ++failed_;
        note(fmt::format("message {}: failed ({}), retry in {}", m.id, what,
                         q::format_duration(std::max<Millis>(0, at - q::SystemClock().now()))));
      }
    } catch (const q::Error& e) {
      if (e.kind() != q::ErrorKind::Stale) throw;
      ++failed_;
      note(fmt::format("message {}: {} ({})", m.id, e.what(), what));
    }
  }

  void beat_and_time_out(Millis now) {
    for (auto& [pid, job] : jobs_) {
      if (now >= job.kill_at) {
        ::kill(-job.pid, SIGKILL);
        job.kill_at = INT64_MAX;
      } else if (now >= job.deadline) {
        ::kill(-job.pid, SIGTERM);
        job.timed_out = true;
        job.deadline = INT64_MAX;
        job.kill_at = now + o_.kill_after;
      }
      if (now >= job.next_heartbeat && !job.lease_lost) {
        job.next_heartbeat = now + heartbeat_every_;
        try {
          broker_.extend(o_.queue, job.message.receipt, visibility_);
        } catch (const q::Error& e) {
          if (e.kind() != q::ErrorKind::Stale && e.kind() != q::ErrorKind::InvalidData) throw;
          job.lease_lost = true;
          note(fmt::format("message {}: heartbeat failed: {}", job.message.id, e.what()));
        }
      }
    }
  }

  // ---- stopping -----------------------------------------------------------------------

  void handle_signals(Millis now) {
    if (g_stop_signals == 0) return;
    stopped_by_signal_ = true;
    if (g_stop_signals >= 2) {
      // Stop at once: the messages come back when their leases run out.
      for (auto& [pid, job] : jobs_) ::kill(-job.pid, SIGTERM);
      stop_now_ = true;
      return;
    }
    if (!stopping_) {
      stopping_ = true;
      stop_deadline_ = now + o_.grace;
      if (!jobs_.empty())
        note(fmt::format("stopping: waiting up to {} for {} running command(s)",
                         q::format_duration(o_.grace), jobs_.size()));
    }
  }

  void release_unfinished() {
    for (auto& [pid, job] : jobs_) {
      ::kill(-job.pid, SIGTERM);
      q::NackOptions nack;
      nack.reason = fmt::format("q work stopped after {} grace", q::format_duration(o_.grace));
      try {
        broker_.nack(o_.queue, job.message.receipt, nack);
        ++released_;
      } catch (const q::Error& e) {
        if (e.kind() != q::ErrorKind::Stale) throw;
      }
    }
    jobs_.clear();
  }

  // ---- waiting --------------------------------------------------------------------------

  void wait_for_events(Millis now) {
    Millis until = now + 1000;  // redraw progress; also covers a missing inotify
    if (stopping_) until = std::min(until, stop_deadline_);
    for (const auto& [pid, job] : jobs_)
      until = std::min({until, job.next_heartbeat, job.deadline, job.kill_at});
    bool want_messages = capacity(now) > 0 || (local_rate_.limited() && !stopping_ &&
                                               jobs_.size() < o_.concurrency && !max_reached());
    if (want_messages) {
      Millis wall_now = q::SystemClock().now();
      Millis next = broker_.next_delivery(o_.queue, true);
      if (next != INT64_MAX) until = std::min(until, now + std::max<Millis>(0, next - wall_now));
      if (local_rate_.limited()) until = std::min(until, std::max(now, local_rate_.ready_at()));
    }
    std::vector<pollfd> fds;
    fds.push_back({g_wake_pipe[0], POLLIN, 0});
    if (want_messages && watch_->fd() >= 0) fds.push_back({watch_->fd(), POLLIN, 0});
    std::vector<Job*> readers;
    for (auto& [pid, job] : jobs_)
      if (job.stderr_fd >= 0) {
        fds.push_back({job.stderr_fd, POLLIN, 0});
        readers.push_back(&job);
      }
    int timeout = static_cast<int>(std::clamp<Millis>(until - now, 0, 1000));
    if (::poll(fds.data(), fds.size(), timeout) <= 0) return;
    if (fds[0].revents) drain_wake_pipe();
    std::size_t first_reader = 1;
    if (want_messages && watch_->fd() >= 0) {
      if (fds[1].revents) watch_->drain();
      first_reader = 2;
    }
    for (std::size_t i = 0; i < readers.size(); ++i)
      if (fds[first_reader + i].revents) read_stderr(*readers[i]);
  }

  // ---- progress -------------------------------------------------------------------------

  void note(const std::string& line) const {
    if (o_.quiet) return;
    clear_progress();
    std::string text = "q work: " + line + "\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, text.data(), text.size());
  }

  void clear_progress() const {
    if (progress_ && progress_shown_) {
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, "\r\033[K", 4);
      progress_shown_ = false;
    }
  }

  std::string counts() const {
    return fmt::format("{} done, {} failed, {} dead-lettered, {} skipped repeats", done_, failed_,
                       dead_lettered_, skipped_);
  }

  void draw_progress(Millis now, bool force) {
    if (!progress_ || (!force && now - last_draw_ < 1000)) return;
    last_draw_ = now;
    // Completions per second over a sliding window of about ten seconds.
    window_.emplace_back(now, done_ + failed_ + dead_lettered_ + skipped_);
    while (window_.size() > 11) window_.pop_front();
    double rate = 0;
    if (window_.size() > 1 && now > window_.front().first)
      rate = static_cast<double>(window_.back().second - window_.front().second) * 1000.0 /
             static_cast<double>(now - window_.front().first);
    auto stats = broker_.stats(o_.queue).at(0);
    std::uint64_t backlog = stats.visible + stats.delayed + stats.in_flight;
    std::string eta = backlog == 0 ? "empty" : rate > 0 ? "empty in " + q::format_duration(static_cast<Millis>(static_cast<double>(backlog) / rate) / 1000 * 1000) : "empty in: never at this rate";
    std::string line = fmt::format("q work {}: {} | {:.1f}/s | depth {} | {}", o_.queue, counts(),
                                   rate, backlog, eta);
    clear_progress();
    line = "\r" + line.substr(0, 200);
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
    progress_shown_ = true;
  }

  void finish_progress() {
    clear_progress();
    if (o_.quiet) return;
    Millis elapsed = steady_now() - started_at_;
    double rate = elapsed > 0 ? static_cast<double>(done_ + failed_ + dead_lettered_ + skipped_) *
                                    1000.0 / static_cast<double>(elapsed)
                              : 0;
    std::string line = fmt::format("q work {}: {}{} in {:.1f}s ({:.1f}/s)\n", o_.queue, counts(),
                                   released_ ? fmt::format(", {} released at stop", released_) : "",
                                   static_cast<double>(elapsed) / 1000.0, rate);
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
  }

  q::Broker& broker_;
  const WorkOptions& o_;
  std::string program_;  // the command's path, looked up in PATH once
  LocalRate local_rate_;
  Millis visibility_ = 0;
  std::optional<Millis> idempotency_window_;
  Millis heartbeat_every_ = 0;
  std::unique_ptr<q::ChangeWatch> watch_;
  std::map<pid_t, Job> jobs_;
  bool stopping_ = false, stop_now_ = false, stopped_by_signal_ = false;
  Millis stop_deadline_ = INT64_MAX;
  std::uint64_t taken_ = 0, done_ = 0, failed_ = 0, dead_lettered_ = 0, skipped_ = 0,
                released_ = 0;
  Millis started_at_ = 0, last_draw_ = 0;
  bool progress_ = false;
  mutable bool progress_shown_ = false;
  std::deque<std::pair<Millis, std::uint64_t>> window_;
};

}  // namespace

int run_worker(q::Broker& broker, const WorkOptions& options) {
  Worker worker(broker, options);
  return worker.run();
}

}  // namespace cli
