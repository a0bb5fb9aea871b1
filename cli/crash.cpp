#include "cli/crash.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "cli/context.hpp"
#include "libq/backends.hpp"

namespace cli {
namespace {

// Prepared in advance: a signal handler may only call async-signal-safe code.
struct Prepared {
  char text[1200];
  std::size_t length = 0;
};
Prepared g_fault, g_stuck, g_abort;
// The handler must run even when the stack itself is what overflowed.
alignas(16) char g_alternate_stack[64 * 1024];

// Seconds of CPU inside one LMDB call without any sign of progress.
constexpr int kStuckTicks = 2;

// /proc/self/io, opened in advance (-1 without /proc).
int g_proc_io = -1;

void say_and_exit(const Prepared& message) {
  ssize_t ignored = ::write(STDERR_FILENO, message.text, message.length);
  (void)ignored;
  _exit(kIoErr);
}

void on_memory_fault(int) { say_and_exit(g_fault); }

// glibc aborts when it finds its heap damaged. LMDB copying a damaged page
// into a write transaction's buffer damages the heap, which glibc may notice
// only later, outside LMDB: after any LMDB call, an abort is reported as
// (probable) damage, with the way to tell it from a bug of q's.
void on_abort(int signo) {
  const auto activity = q::storage_activity();
  if (activity.inside || activity.damaged) say_and_exit(g_fault);
  if (activity.calls > 0) say_and_exit(g_abort);
  signal(signo, SIG_DFL);
  raise(signo);
}

// The sum of the numbers in the write lines of /proc/self/io (wchar, syscw:
// bytes and calls of write-like system calls, tmpfs included); 0 without it.
// Only the write side: this very read counts as a read. Async-signal-safe.
unsigned long long written_so_far() {
  if (g_proc_io < 0) return 0;
  char text[512];
  ssize_t n = ::pread(g_proc_io, text, sizeof text - 1, 0);
  if (n <= 0) return 0;
  unsigned long long sum = 0, value = 0;
  bool write_line = false, at_line_start = true;
  for (ssize_t i = 0; i < n; ++i) {
    char c = text[i];
    if (at_line_start) write_line = c == 'w' || (c == 's' && i + 4 < n && text[i + 4] == 'w');
    at_line_start = c == '\n';
    if (!write_line) continue;
    if (c >= '0' && c <= '9')
      value = value * 10 + static_cast<unsigned>(c - '0');
    else if (c == '\n')
      sum += value, value = 0;
  }
  return sum;
}

// A figure that grows whenever the process makes visible progress: memory
// newly touched (page faults), blocks read or written, waits for the disk
// (voluntary context switches) and bytes written. A commit of a huge
// transaction does all of these as it goes, for as long as it takes; LMDB
// looping inside one lookup on a damaged page does none of them.
unsigned long long progress() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<unsigned long long>(usage.ru_minflt + usage.ru_majflt + usage.ru_inblock +
                                         usage.ru_oublock + usage.ru_nvcsw) +
         written_so_far();
}

// Every second of CPU time: a call that spends seconds of CPU inside LMDB
// without any progress at all is looping. CPU time alone is no sign: a
// legitimate commit of a huge transaction can take many seconds of it on a
// loaded machine.
void on_cpu_tick(int) {
  int saved = errno;
  static unsigned long last_calls = 0;
  static unsigned long long last_progress = 0;
  static int idle_ticks_in_one_call = 0;
  const auto activity = q::storage_activity();
  const unsigned long long now = progress();
  if (activity.inside && activity.calls == last_calls && now == last_progress) {
    if (++idle_ticks_in_one_call >= kStuckTicks) say_and_exit(g_stuck);
  } else {
    idle_ticks_in_one_call = 0;
  }
  last_calls = activity.calls;
  last_progress = now;
  errno = saved;
}

void prepare(Prepared& message, const char* format, const std::string& path) {
  int n = std::snprintf(message.text, sizeof message.text, format, path.c_str(), path.c_str());
  message.length = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof message.text - 1);
}

void handle(int signo, void (*handler)(int), int flags) {
  struct sigaction action {};
  action.sa_handler = handler;
  action.sa_flags = flags;
  sigemptyset(&action.sa_mask);
  sigaction(signo, &action, nullptr);
}

}  // namespace

void report_crashes_as_damage(const std::string& queue_file) {
  const std::string path = queue_file.substr(0, 500);
  prepare(g_fault,
          "q: %s: q was stopped by a memory fault while using the queue file: the file is "
          "damaged (changed on disk, or cut short while in use); 'q -f %s verify' checks it; "
          "restore it from a backup\n",
          path);
  prepare(g_abort,
          "q: %s: q stopped on damaged memory after reading the queue file: the file is "
          "probably damaged; 'q -f %s verify' checks it (restore it from a backup); if it "
          "verifies clean, this is a bug in q\n",
          path);
  prepare(g_stuck,
          "q: %s: stopped: LMDB spent seconds of CPU inside one call without any progress (no "
          "memory touched, nothing written), the endless loop a damaged page can cause; 'q -f "
          "%s verify' checks the file (restore it from a backup only if it reports damage); if "
          "it verifies clean, this is a bug in q\n",
          path);

  stack_t alternate{};
  alternate.ss_sp = g_alternate_stack;
  alternate.ss_size = sizeof g_alternate_stack;
  sigaltstack(&alternate, nullptr);
  handle(SIGSEGV, on_memory_fault, SA_ONSTACK | SA_RESETHAND);
  handle(SIGBUS, on_memory_fault, SA_ONSTACK | SA_RESETHAND);
  handle(SIGABRT, on_abort, SA_ONSTACK);
  // CPU time, not wall time: waiting (for the lock, the disk, a message)
  // never counts. SA_RESTART: the tick must not interrupt q's own I/O.
  g_proc_io = ::open("/proc/self/io", O_RDONLY | O_CLOEXEC);
  handle(SIGPROF, on_cpu_tick, SA_RESTART);
  struct itimerval every_second {};
  every_second.it_interval.tv_sec = 1;
  every_second.it_value.tv_sec = 1;
  setitimer(ITIMER_PROF, &every_second, nullptr);
}

}  // namespace cli
