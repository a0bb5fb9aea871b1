#include "cli/work/stop_signals.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "libq/error.hpp"

namespace cli {
namespace {

int g_wake_pipe[2] = {-1, -1};
volatile sig_atomic_t g_stop_signals = 0;
sigset_t g_stop_set;

void on_signal(int signo) {
  int saved = errno;
  if (sigismember(&g_stop_set, signo) == 1) g_stop_signals = g_stop_signals + 1;
  if (g_wake_pipe[1] >= 0) {
    char byte = 0;
    [[maybe_unused]] auto n = ::write(g_wake_pipe[1], &byte, 1);
  }
  errno = saved;
}

}  // namespace

void install_stop_signals(std::initializer_list<int> stop, std::initializer_list<int> wake,
                          bool wake_pipe) {
  if (wake_pipe && g_wake_pipe[0] < 0 && ::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw q::Error(q::ErrorKind::Io, fmt::format("cannot create pipe: {}", std::strerror(errno)));
  sigemptyset(&g_stop_set);
  for (int signo : stop) sigaddset(&g_stop_set, signo);
  sigset_t ours;
  sigemptyset(&ours);
  for (auto signals : {stop, wake}) {
    for (int signo : signals) {
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART | (signo == SIGCHLD ? SA_NOCLDSTOP : 0);
      sigaction(signo, &sa, nullptr);
      sigaddset(&ours, signo);
    }
  }
  sigprocmask(SIG_UNBLOCK, &ours, nullptr);
}

int stop_signals() { return g_stop_signals; }

int wake_fd() { return g_wake_pipe[0]; }

void drain_wake() {
  char buf[256];
  while (g_wake_pipe[0] >= 0 && ::read(g_wake_pipe[0], buf, sizeof buf) > 0) {
  }
}

}  // namespace cli
