#include "crash.hpp"

#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "context.hpp"
#include "lmdb_store.hpp"

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

constexpr int kStuckTicks = 2;  // seconds of CPU inside one LMDB call

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
  const auto& activity = q::store::g_lmdb_activity;
  if (activity.inside || activity.damaged) say_and_exit(g_fault);
  if (activity.calls > 0) say_and_exit(g_abort);
  signal(signo, SIG_DFL);
  raise(signo);
}

// Every second of CPU time: no LMDB call takes seconds of CPU on a sound file.
void on_cpu_tick(int) {
  static unsigned long last_calls = 0;
  static int ticks_in_one_call = 0;
  const auto& activity = q::store::g_lmdb_activity;
  if (activity.inside && activity.calls == last_calls) {
    if (++ticks_in_one_call >= kStuckTicks) say_and_exit(g_stuck);
  } else {
    ticks_in_one_call = 0;
  }
  last_calls = activity.calls;
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
          "q: %s: LMDB ran for seconds inside one lookup without finishing: the queue file is "
          "damaged; 'q -f %s verify' checks it; restore it from a backup\n",
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
  handle(SIGPROF, on_cpu_tick, SA_RESTART);
  struct itimerval every_second {};
  every_second.it_interval.tv_sec = 1;
  every_second.it_value.tv_sec = 1;
  setitimer(ITIMER_PROF, &every_second, nullptr);
}

}  // namespace cli
