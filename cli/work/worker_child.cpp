#include "cli/work/worker_child.hpp"

#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/files.hpp"
#include "cli/work/stop_signals.hpp"
#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

extern char** environ;

namespace cli::work {

using q::Millis;

void install_signals() { install_stop_signals({SIGTERM, SIGINT}, {SIGCHLD}, true); }
int wake_fd() { return cli::wake_fd(); }
int stop_signals() { return cli::stop_signals(); }

namespace {

// The signals a child sets back to their default before its exec: every
// signal q work handles (or ignores on its own account: SIGPIPE, SIGXFSZ), so
// that one arriving since the clone (blocked until then) takes its default
// action instead of running q work's handler in the child and being lost.
// Signals ignored by whoever started q work stay ignored (nohup). Looked up
// once, in q work (its handlers are set before the first command starts):
// the child, which runs while q work waits, makes a few calls instead of two
// per signal.
const sigset_t& signals_to_reset() {
  static const sigset_t set = [] {
    sigset_t s;
    sigemptyset(&s);
    for (int signo = 1; signo < NSIG; ++signo) {
      if (signo == SIGKILL || signo == SIGSTOP) continue;
      struct sigaction current {};
      if (sigaction(signo, nullptr, &current) != 0) continue;  // glibc's own signals
      bool ours = current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
      if (ours || signo == SIGPIPE || signo == SIGXFSZ) sigaddset(&s, signo);
    }
    return s;
  }();
  return set;
}

// In the child, before exec: those signals to their default, then an empty
// mask. Only async-signal-safe calls. Not instrumented in a sanitizer build
// (Q_SANITIZE), like the rest of the child: it runs on a stack of its own
// that AddressSanitizer does not know.
__attribute__((no_sanitize_address)) void reset_signals_in_child(const sigset_t& reset) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int signo = 1; signo < NSIG; ++signo)
    if (sigismember(&reset, signo) == 1) sigaction(signo, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Blocks every signal from before the clone until the parent's side is done,
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

}  // namespace

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
    // "cat | wc -c" as one word: a shell line, and no shell is used.
    bool shell_line = name.find_first_of(" \t|&;<>()$`'\"*?") != std::string::npos;
    return q::Error(
        q::ErrorKind::Usage,
        fmt::format("command '{}': {}{}", name, why,
                    shell_line ? fmt::format("; no shell is used: try -- sh -c '{}'", name) : ""));
  };
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
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
static std::string attribute_variable(const std::string& key) {
  std::string name = "Q_ATTR_";
  for (unsigned char c : key)
    name.push_back(std::isalnum(c) ? static_cast<char>(std::toupper(c)) : '_');
  return name;
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signo);
}

// q work's environment, each name once: the variables q work sets replace
// inherited ones of the same name (getenv reads the first), inherited
// Q_ATTR_* go (only this message's attributes), and of attribute keys that
// map to one name the last one wins.
std::vector<std::string> environment(const q::Message& m, const std::string& queue,
                                     const std::string& queue_file) {
  std::vector<std::string> env;
  std::map<std::string, std::size_t, std::less<>> at;  // name -> index in env
  auto set = [&](const std::string& name, const std::string& value) {
    auto [it, fresh] = at.emplace(name, env.size());
    if (fresh)
      env.push_back(name + "=" + value);
    else
      env[it->second] = name + "=" + value;
  };
  static const std::set<std::string_view> ours = {"Q_QUEUE",   "Q_FILE",          "Q_MESSAGE_ID",
                                                  "Q_RECEIPT", "Q_RECEIVE_COUNT", "Q_SENT_AT"};
  for (char** e = environ; *e; ++e) {
    std::string_view var(*e);
    auto eq = var.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = var.substr(0, eq);
    if (name.substr(0, 7) == "Q_ATTR_" || ours.count(name)) continue;
    if (at.count(name)) continue;  // a name twice in q work's own: the first, as getenv
    set(std::string(name), std::string(var.substr(eq + 1)));
  }
  set("Q_QUEUE", queue);
  set("Q_FILE", queue_file);
  set("Q_MESSAGE_ID", m.id);
  set("Q_RECEIPT", m.receipt);
  set("Q_RECEIVE_COUNT", std::to_string(m.receive_count));
  set("Q_SENT_AT", q::format_time(m.sent_at));
  for (const auto& [k, v] : m.attributes) set(attribute_variable(k), v);
  return env;
}

namespace {

// What the child of spawn needs, in memory it shares with q work until its exec.
struct Exec {
  const char* path;
  char** argv;
  char** envp;
  int body_fd, stdout_fd, stderr_fd;
  pid_t parent;
  const sigset_t* reset;
  int exec_errno;  // set by the child when execve failed
};

// The child, on its own stack in q work's memory (CLONE_VM) while q work is
// suspended (CLONE_VFORK): only async-signal-safe calls, nothing that
// allocates or takes a lock, no LMDB; it ends in execve or _exit.
__attribute__((no_sanitize_address)) int exec_child(void* arg) {
  auto* e = static_cast<Exec*>(arg);
  setpgid(0, 0);                     // our own group: a terminal's Ctrl-C is for q work to handle
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // the runner died: stop, the message comes back
  if (getppid() != e->parent) _exit(127);
  reset_signals_in_child(*e->reset);
  dup2(e->body_fd, STDIN_FILENO);
  if (e->stdout_fd >= 0) dup2(e->stdout_fd, STDOUT_FILENO);
  dup2(e->stderr_fd, STDERR_FILENO);
  execve(e->path, e->argv, e->envp);
  e->exec_errno = errno;  // q work reads it once this child has exited
  _exit(errno == ENOENT ? 127 : 126);
}

// The child's stack, made once: q work starts one command at a time and
// resumes only when the previous child has exec'd or exited.
constexpr std::size_t kChildStack = 256 * 1024;
char* child_stack_top() {
  static char* top = [] {
    void* stack = mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
      throw q::Error(q::ErrorKind::Io,
                     fmt::format("cannot start command: {}", std::strerror(errno)));
    return static_cast<char*>(stack) + kChildStack;
  }();
  return top;
}

}  // namespace

// Started like posix_spawn does it, not by fork: clone with CLONE_VM and
// CLONE_VFORK shares q work's memory until the exec, so no page tables are
// copied and no page of q work (its LMDB map included) becomes copy-on-write;
// a fork per message cost more than the command's own start. posix_spawn
// itself cannot set PR_SET_PDEATHSIG.
Child spawn(const std::string& program, const std::vector<std::string>& args,
            const std::vector<std::string>& env, const std::string& body, int stdout_fd) {
  // The body goes through a memory file, so a command that never reads its
  // stdin cannot block us.
  int body_fd = memfd_create("q-body", MFD_CLOEXEC);
  int err_pipe[2];
  if (body_fd < 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw q::Error(q::ErrorKind::Io, fmt::format("cannot start command: {}", std::strerror(errno)));
  if (!q::files::write_all(body_fd, body))
    throw q::Error(q::ErrorKind::Io, fmt::format("cannot pass the body: {}", std::strerror(errno)));
  ::lseek(body_fd, 0, SEEK_SET);

  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  Exec exec{argv[0],     argv.data(), envp.data(),         body_fd, stdout_fd,
            err_pipe[1], getpid(),    &signals_to_reset(), 0};
  char* stack = child_stack_top();

  pid_t pid;
  {
    SignalsBlocked blocked;  // none reaches the child before reset_signals_in_child
    pid = ::clone(exec_child, stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &exec);
  }
  int clone_errno = errno;
  ::close(body_fd);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(err_pipe[0]);
    throw q::Error(q::ErrorKind::Io,
                   fmt::format("cannot start command: {}", std::strerror(clone_errno)));
  }
  Child child;
  child.forked = steady_now();
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  child.exec_errno = exec.exec_errno;
  child.pid = pid;
  child.stderr_fd = err_pipe[0];
  return child;
}

void pump_stderr(int& fd, std::string& tail, std::string& head,
                 const std::function<void()>& before_write) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fd);
        fd = -1;
      }
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    before_write();
    [[maybe_unused]] auto w = ::write(STDERR_FILENO, buf, static_cast<std::size_t>(n));
    tail.append(buf, static_cast<std::size_t>(n));
    if (head.size() < 1024)
      head.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), 1024 - head.size()));
    // Kept by whole characters: the reason is stored, exported and imported as text.
    if (tail.size() > 4096) tail = std::string(q::utf8_suffix(tail, 2048));
  }
}

int output_pipe(int& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw q::Error(q::ErrorKind::Io,
                   fmt::format("cannot create the output pipe: {}", std::strerror(errno)));
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  write_end = fds[1];
  return fds[0];
}

bool pump_output(int& fd, std::string& output, std::uint64_t limit) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    if (n <= 0) {
      ::close(fd);
      fd = -1;
      return true;
    }
    if (output.size() + static_cast<std::uint64_t>(n) > limit) {
      // Over the limit: what was read goes, and so does the rest.
      std::string().swap(output);
      ::close(fd);
      fd = -1;
      return false;
    }
    output.append(buf, static_cast<std::size_t>(n));
  }
}

bool reap_one(Reaped& out) {
  int status = 0;
  pid_t pid = waitpid(-1, &status, WNOHANG);
  if (pid <= 0) return false;
  out.pid = pid;
  out.status = status;
  return true;
}

}  // namespace cli::work
