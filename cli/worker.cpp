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
#include <set>

#include <fmt/format.h>

#include "error.hpp"
#include "files.hpp"
#include "stop_signals.hpp"
#include "timefmt.hpp"
#include "utf8.hpp"

extern char** environ;

namespace cli {
namespace {

using q::Millis;

// ---- signals: the handler only counts and wakes the loop (stop_signals.hpp) -----

void install_signals() { install_stop_signals({SIGTERM, SIGINT}, {SIGCHLD}, true); }

// In the child, before exec: every signal q work handles (or ignores on its
// own account: SIGPIPE, SIGXFSZ) back to its default, then an empty mask, so
// a signal that arrived since the fork (blocked until now) takes its default
// action instead of running q work's handler in the child and being lost.
// Signals ignored by whoever started q work stay ignored (nohup). Only
// async-signal-safe calls.
void reset_signals_in_child() {
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo == SIGKILL || signo == SIGSTOP) continue;
    struct sigaction current {};
    if (sigaction(signo, nullptr, &current) != 0) continue;  // glibc's own signals
    bool ours = current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
    if (ours || signo == SIGPIPE || signo == SIGXFSZ) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(signo, &dfl, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Blocks every signal from before a fork until the parent's side is done,
// so that none reaches the child before reset_signals_in_child.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &saved_);
  }
  ~SignalsBlocked() { sigprocmask(SIG_SETMASK, &saved_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

void drain_wake_pipe() { drain_wake(); }

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
  std::string stderr_head;      // the start of stderr, for its first line (grouping)
  Millis started = 0;           // at the fork
  Millis next_heartbeat = 0;
  Millis deadline = INT64_MAX;  // --timeout: SIGTERM
  Millis kill_at = INT64_MAX;   // SIGKILL after a SIGTERM (timeout or stop)
  bool timed_out = false;
  bool stopped = false;         // SIGTERM after --grace: release once it has exited
  bool lease_lost = false;
  int exec_errno = 0;           // the command could not be run at all
  bool skip = false;            // an idempotent repeat: ack without running
  int status = 0;               // wait status, once exited
};


class Worker {
 public:
  Worker(q::Broker& broker, const WorkOptions& options)
      : broker_(broker), o_(options), local_rate_(options.rate) {
    progress_ = !o_.quiet && isatty(STDERR_FILENO);
    auto config = broker_.configure(o_.queue, {});
    visibility_ = o_.visibility_timeout.value_or(config.visibility_timeout);
    if (visibility_ < kMinWorkVisibility) {
      // Only the queue's own setting can be this short (the flag is checked):
      // q work cannot refuse to consume the queue, so it leases longer.
      note(fmt::format("queue {}: its visibility timeout {} is too short for a heartbeat; "
                       "leasing messages for {} instead",
                       o_.queue, q::format_duration(visibility_),
                       q::format_duration(kMinWorkVisibility)));
      visibility_ = kMinWorkVisibility;
    }
    idempotency_window_ = o_.idempotency_window.value_or(config.retention);
    // Extend well before the lease runs out: at a third of it.
    heartbeat_every_ = std::max<Millis>(visibility_ / 3, 100);
    program_ = find_program(o_.command.at(0));
  }

  int run() {
    install_signals();
    close_on_exec_everything();
    watch_ = broker_.watch();
    started_at_ = steady_now();
    register_command();
    for (;;) {
      Millis now = steady_now();
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
    if (tripped_ && !trip_paused_) broker_.pause(o_.queue, 0, trip_reason_);
    finish_progress();
    unregister_command();
    // Stopped by a signal: a clean stop, whatever failed before it (a service
    // manager must not count it as a failure). Otherwise say if anything failed.
    if (tripped_) return kTripped;
    if (stopped_by_signal_) return 0;
    return failed_ + dead_lettered_ > 0 ? kSomeFailed : 0;
  }

 private:
  // --trip: N failures within DUR pause the queue (a downstream is down:
  // retrying every message only moves them all towards the dead-letter queue)
  // and stop this runner as SIGTERM would; an operator resumes the queue.
  void count_failure(const std::string& what) {
    if (!o_.trip || tripped_) return;
    Millis now = steady_now();
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
    if (!with_lock([&] { broker_.pause(o_.queue, 0, trip_reason_); })) return;
    trip_paused_ = true;
    note(fmt::format("queue {}: paused ({}); resume it with 'q resume {}'", o_.queue,
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
    Millis since = q::SystemClock().now();
    if (with_lock([&] { broker_.register_worker(static_cast<std::uint32_t>(::getpid()), since, line); }))
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
    const Millis began = steady_now();
    try {
      op();
    } catch (const q::Error& e) {
      if (e.kind() != q::ErrorKind::Busy) throw;
      Millis now = steady_now();
      if (lock_wait_since_ == 0) lock_wait_since_ = began;
      note(fmt::format("{}; still waiting for it ({} so far), running commands go on",
                       e.what(), q::format_duration((now - lock_wait_since_) / 100 * 100)));
      return false;
    }
    if (lock_wait_since_ != 0) {
      note(fmt::format("got the writer lock after {}",
                       q::format_duration((steady_now() - lock_wait_since_) / 100 * 100)));
      lock_wait_since_ = 0;
    }
    return true;
  }

  // ---- taking work ------------------------------------------------------------

  bool max_reached() const { return o_.max_messages && taken_ >= *o_.max_messages; }

  std::uint64_t capacity(Millis now) const {
    if (stopping_ || max_reached() || busy() >= o_.concurrency) return 0;
    std::uint64_t n = o_.concurrency - busy();
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
    options.holder_pid = static_cast<std::uint32_t>(::getpid());
    options.worker_since = registered_since_;
    std::vector<q::Message> messages;
    if (!with_lock([&] { messages = broker_.receive(o_.queue, options); })) return false;
    for (auto& m : messages) {
      if (adopt_redelivery(m)) continue;
      ++taken_;
      local_rate_.take(now);
      std::string key = idempotency_key(m);
      if (!key.empty() && broker_.is_done(o_.queue, key)) {
        Job skipped;
        skipped.message = std::move(m);
        skipped.skip = true;
        exited_.push_back(std::move(skipped));
        continue;
      }
      start(std::move(m), std::move(key), now);
    }
    settle_exited();
    return !messages.empty();
  }

  // A message this runner still runs (or has yet to settle) came back: its
  // lease ran out before a heartbeat could extend it (the writer lock was held
  // too long, or q work was stopped). The running command keeps it under the
  // new receipt; it is never started a second time.
  bool adopt_redelivery(const q::Message& m) {
    auto adopt = [&](Job& job) {
      note(fmt::format("message {}: its lease ran out while its command ran; this runner "
                       "took it again and keeps the one run (raise --visibility-timeout?)",
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
      note(fmt::format("message {}: idempotency key longer than {} bytes, not used", m.id,
                       q::kMaxIdempotencyKey));
      return {};
    }
    return key;
  }

  // ---- running a command --------------------------------------------------------

  // q work's environment, each name once: the variables q work sets replace
  // inherited ones of the same name (getenv reads the first), inherited
  // Q_ATTR_* go (only this message's attributes), and of attribute keys that
  // map to one name the last one wins.
  std::vector<std::string> environment(const q::Message& m) const {
    std::vector<std::string> env;
    std::map<std::string, std::size_t, std::less<>> at;  // name -> index in env
    auto set = [&](const std::string& name, const std::string& value) {
      auto [it, fresh] = at.emplace(name, env.size());
      if (fresh)
        env.push_back(name + "=" + value);
      else
        env[it->second] = name + "=" + value;
    };
    static const std::set<std::string_view> ours = {"Q_QUEUE",     "Q_FILE",
                                                    "Q_MESSAGE_ID", "Q_RECEIPT",
                                                    "Q_RECEIVE_COUNT", "Q_SENT_AT"};
    for (char** e = environ; *e; ++e) {
      std::string_view var(*e);
      auto eq = var.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view name = var.substr(0, eq);
      if (name.substr(0, 7) == "Q_ATTR_" || ours.count(name)) continue;
      if (at.count(name)) continue;  // a name twice in q work's own: the first, as getenv
      set(std::string(name), std::string(var.substr(eq + 1)));
    }
    set("Q_QUEUE", o_.queue);
    set("Q_FILE", o_.queue_file);
    set("Q_MESSAGE_ID", m.id);
    set("Q_RECEIPT", m.receipt);
    set("Q_RECEIVE_COUNT", std::to_string(m.receive_count));
    set("Q_SENT_AT", q::format_time(m.sent_at));
    for (const auto& [k, v] : m.attributes) set(attribute_variable(k), v);
    return env;
  }

  void start(q::Message m, std::string key, Millis now) {
    // The body goes through a memory file, so a command that never reads its
    // stdin cannot block us.
    int body_fd = memfd_create("q-body", MFD_CLOEXEC);
    int err_pipe[2], exec_pipe[2];
    if (body_fd < 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0)
      throw q::Error(q::ErrorKind::Io, fmt::format("cannot start command: {}", std::strerror(errno)));
    if (!q::files::write_all(body_fd, m.body))
      throw q::Error(q::ErrorKind::Io, fmt::format("cannot pass the body: {}", std::strerror(errno)));
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

    pid_t pid;
    {
      SignalsBlocked blocked;
      pid = fork();
      if (pid == 0) {
        // Only async-signal-safe calls until exec; no LMDB here.
        setpgid(0, 0);  // our own group: a terminal's Ctrl-C is for q work to handle
        prctl(PR_SET_PDEATHSIG, SIGTERM);  // the runner died: stop, the message comes back
        if (getppid() != parent) _exit(127);
        reset_signals_in_child();
        dup2(body_fd, STDIN_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
        execve(argv[0], argv.data(), envp.data());
        // Tell the parent why (the pipe closes unread on a successful exec).
        int why = errno;
        [[maybe_unused]] auto n = ::write(exec_pipe[1], &why, sizeof why);
        _exit(why == ENOENT ? 127 : 126);
      }
    }
    if (pid < 0)
      throw q::Error(q::ErrorKind::Io, fmt::format("cannot fork: {}", std::strerror(errno)));
    Millis forked = steady_now();
    setpgid(pid, pid);
    ::close(body_fd);
    ::close(err_pipe[1]);
    ::close(exec_pipe[1]);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);

    Job job;
    job.exec_errno = exec_result(exec_pipe[0]);
    ::close(exec_pipe[0]);
    job.message = std::move(m);
    job.key = std::move(key);
    job.pid = pid;
    job.stderr_fd = err_pipe[0];
    job.started = forked;
    job.next_heartbeat = now + heartbeat_every_;  // the lease counts from the receive
    // The timeout counts from the fork: not from before a wait for the lock.
    if (o_.timeout) job.deadline = forked + *o_.timeout;
    jobs_.emplace(pid, std::move(job));
  }

  // Waits for the exec (the pipe closes) or its failure (the errno arrives);
  // the child does nothing that can block before either.
  static int exec_result(int fd) {
    int why = 0;
    for (;;) {
      ssize_t n = ::read(fd, &why, sizeof why);
      if (n < 0 && errno == EINTR) continue;
      return n == static_cast<ssize_t>(sizeof why) ? why : 0;
    }
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
      if (job.stderr_head.size() < 1024)
        job.stderr_head.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), 1024));
      // Kept by whole characters: the reason is stored, exported and imported as text.
      if (job.stderr_tail.size() > 4096) job.stderr_tail = std::string(q::utf8_suffix(job.stderr_tail, 2048));
    }
  }

  // ---- outcomes -----------------------------------------------------------------------

  // Moves every command that has ended to exited_, to be settled.
  void reap_children() {
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = jobs_.find(pid);
      if (it == jobs_.end()) continue;
      Job& job = it->second;
      if (job.stderr_fd >= 0) read_stderr(job);
      if (job.stderr_fd >= 0) ::close(job.stderr_fd);
      job.stderr_fd = -1;
      job.status = status;
      exited_.push_back(std::move(job));
      jobs_.erase(it);
    }
  }

  static bool plain_success(const Job& job) {
    return !job.timed_out && !job.stopped && job.exec_errno == 0 && WIFEXITED(job.status) &&
           WEXITSTATUS(job.status) == 0 && job.key.empty();
  }

  // Records the outcome of every ended command (and acks idempotent repeats):
  // plain acks share one transaction. What meets a busy writer lock stays in
  // exited_ for the next turn.
  void settle_exited() {
    if (exited_.empty()) return;
    std::vector<std::string> acks;
    for (const auto& job : exited_)
      if (job.skip || plain_success(job)) acks.push_back(job.message.receipt);
    if (!acks.empty()) {
      std::vector<q::ReceiptResult> results;
      if (!with_lock([&] { results = broker_.ack(o_.queue, acks); })) return;
      for (const auto& result : results)
        if (result.outcome != q::ReceiptOutcome::Done) lease_lost_at_ack(result.receipt);
      for (const auto& job : exited_) {
        if (job.skip) ++skipped_;
        else if (plain_success(job)) ++done_;
      }
      exited_.erase(std::remove_if(exited_.begin(), exited_.end(),
                                   [](const Job& job) { return job.skip || plain_success(job); }),
                    exited_.end());
    }
    while (!exited_.empty()) {
      if (!with_lock([&] { finish(exited_.front()); })) return;
      exited_.pop_front();
    }
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
    if (text.size() > 1000) text = "..." + std::string(q::utf8_suffix(text, 1000));
    return text;
  }

  // For the attempt history: the exit status (128+N for signal N) and the
  // first line of stderr apart from its tail, so that dead letters group by
  // how they failed (`q dlq list --by-reason`), not by each run's details.
  static q::RunReport run_report(const Job& job) {
    q::RunReport run;
    if (job.exec_errno == 0 && WIFEXITED(job.status)) run.exit_status = WEXITSTATUS(job.status);
    if (job.exec_errno == 0 && WIFSIGNALED(job.status)) run.exit_status = 128 + WTERMSIG(job.status);
    std::string_view head(job.stderr_head);
    while (!head.empty() && (head.front() == '\n' || head.front() == '\r')) head.remove_prefix(1);
    auto nl = head.find('\n');
    std::string_view first = head.substr(0, nl);
    if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
    run.first_line = std::string(q::utf8_prefix(first, 1000));
    run.stderr_tail = stderr_lines(job.stderr_tail);
    return run;
  }

  std::string cannot_run(int why) const {
    std::string text = fmt::format("cannot run {}: {}", program_, std::strerror(why));
    if (why == E2BIG)
      text += " (the message's attributes and q work's environment exceed the system's "
              "limit for a command's arguments and environment)";
    return text;
  }

  // One ended command's outcome; throws q::Error Busy (the caller tries again
  // later: nothing was recorded or counted).
  void finish(const Job& job) {
    const int status = job.status;
    std::string what;
    bool success = false, bad_message = false;
    if (job.stopped) {
      what = fmt::format("q work stopped after {} grace", q::format_duration(o_.grace));
    } else if (job.timed_out) {
      what = fmt::format("timed out after {}", q::format_duration(*o_.timeout));
    } else if (job.exec_errno != 0) {
      what = cannot_run(job.exec_errno);
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
    q::RunReport run = run_report(job);
    const auto& m = job.message;
    try {
      if (job.stopped) {
        // Released only now that its command has exited: no second run can
        // overlap this one.
        q::NackOptions nack;
        nack.reason = what;
        nack.run = run;
        broker_.nack(o_.queue, m.receipt, nack);
        ++released_;
      } else if (success) {
        if (broker_.ack_done(o_.queue, m.receipt, job.key, *idempotency_window_) !=
            q::ReceiptOutcome::Done)
          lease_lost_at_ack(m.receipt);
        ++done_;
      } else if (bad_message) {
        broker_.dead_letter(o_.queue, m.receipt, reason, run);
        ++dead_lettered_;
        count_failure(what);
        note(fmt::format("message {}: dead-lettered ({})", m.id, what));
      } else {
        q::NackOptions nack;
        nack.backoff = true;
        nack.backoff_base = o_.backoff_base;
        nack.backoff_cap = o_.backoff_cap;
        nack.reason = std::string(q::utf8_prefix(reason, q::kMaxReason));
        nack.run = run;
        Millis at = broker_.nack(o_.queue, m.receipt, nack);
        ++failed_;
        count_failure(what);
        note(fmt::format("message {}: failed ({}), retry in {}", m.id, what,
                         q::format_duration(std::max<Millis>(0, at - q::SystemClock().now()))));
      }
    } catch (const q::Error& e) {
      if (e.kind() != q::ErrorKind::Stale) throw;
      if (job.stopped) return;  // its lease ran out meanwhile: it is back all the same
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
    }
    // The lease is kept while the command runs, also after a SIGTERM: its
    // message must not reach another consumer before the command has exited.
    for (auto& [pid, job] : jobs_) {
      if (now < job.next_heartbeat || job.lease_lost) continue;
      bool extended = with_lock([&] {
        try {
          broker_.extend(o_.queue, job.message.receipt, visibility_);
        } catch (const q::Error& e) {
          if (e.kind() != q::ErrorKind::Stale && e.kind() != q::ErrorKind::InvalidData) throw;
          job.lease_lost = true;
          note(fmt::format("message {}: heartbeat failed: {}", job.message.id, e.what()));
        }
      });
      if (!extended) return;  // the lock is busy for every job alike: next turn
      job.next_heartbeat = now + heartbeat_every_;
    }
  }

  // ---- stopping -----------------------------------------------------------------------

  void handle_signals(Millis now) {
    if (stop_signals() == 0) return;
    stopped_by_signal_ = true;
    if (stop_signals() >= 2) {
      // Stop at once: the messages come back when their leases run out (a
      // command may still run: its message is not released under it).
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

  // Past --grace: SIGTERM the commands still running, SIGKILL --kill-after
  // later; each message is released once its command has exited (settle).
  void stop_unfinished(Millis now) {
    for (auto& [pid, job] : jobs_) {
      if (job.stopped) continue;
      ::kill(-job.pid, SIGTERM);
      job.stopped = true;
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
      Millis wall_now = q::SystemClock().now();
      Millis next = broker_.next_delivery(o_.queue, true);
      // next is INT64_MIN when a message is ready: no subtraction from it.
      if (next <= wall_now) until = now;
      else if (next != INT64_MAX) until = std::min(until, now + (next - wall_now));
      if (local_rate_.limited()) until = std::min(until, std::max(now, local_rate_.ready_at()));
    }
    std::vector<pollfd> fds;
    fds.push_back({wake_fd(), POLLIN, 0});
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
  std::deque<Job> exited_;     // ended (or skipped), outcome not yet recorded
  Millis lock_wait_since_ = 0;  // waiting for the writer lock since (steady), or 0
  bool stopping_ = false, stop_now_ = false, stopped_by_signal_ = false;
  Millis stop_deadline_ = INT64_MAX;
  std::uint64_t taken_ = 0, done_ = 0, failed_ = 0, dead_lettered_ = 0, skipped_ = 0,
                released_ = 0;
  Millis started_at_ = 0, last_draw_ = 0;
  Millis registered_since_ = 0;
  bool tripped_ = false, trip_paused_ = false;
  std::string trip_reason_;
  std::deque<Millis> recent_failures_;  // registry key with our pid; 0: not registered
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
