#include "holder.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace q {
namespace {

struct ProcStat {
  char state = '?';
  std::uint64_t start_time = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ..."; comm may hold
// spaces and parentheses, so fields are counted from the last ')'.
std::optional<ProcStat> read_stat(std::uint32_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  ssize_t n;
  do n = ::read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  std::string text(buf, static_cast<std::size_t>(n));
  auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= text.size()) return std::nullopt;
  ProcStat st;
  st.state = text[close_paren + 2];
  // Fields after ')': state is field 3, start time field 22.
  std::size_t at = close_paren + 2;
  for (int field = 3; field < 22; ++field) {
    at = text.find(' ', at);
    if (at == std::string::npos) return std::nullopt;
    ++at;
  }
  st.start_time = std::strtoull(text.c_str() + at, nullptr, 10);
  return st;
}

std::uint64_t pid_namespace(const std::string& proc_dir) {
  struct stat st {};
  if (::stat((proc_dir + "/ns/pid").c_str(), &st) != 0) return 0;
  return st.st_ino;
}

bool gone(char state) { return state == 'Z' || state == 'X' || state == 'x'; }

}  // namespace

std::optional<Holder> find_holder(std::uint32_t pid) {
  if (pid == 0 || pid > static_cast<std::uint32_t>(INT32_MAX)) return std::nullopt;
  auto st = read_stat(pid);
  if (!st) {
    // No /proc to read: a holder known by its pid alone.
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return std::nullopt;
    if (::access("/proc/self/stat", R_OK) == 0) return std::nullopt;
    return Holder{pid, 0, 0};
  }
  if (gone(st->state)) return std::nullopt;
  return Holder{pid, st->start_time, pid_namespace("/proc/self")};
}

bool holder_alive(const Holder& holder) {
  if (holder.pid == 0 || holder.pid > static_cast<std::uint32_t>(INT32_MAX)) return false;
  // Its pid names some other process (or none) in this pid namespace.
  auto here = pid_namespace("/proc/self");
  if (holder.pid_namespace != 0 && here != 0 && holder.pid_namespace != here) return true;
  if (::kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH) return false;
  auto st = read_stat(holder.pid);
  if (!st) return true;  // it exists (kill found it) but cannot be read here
  if (gone(st->state)) return false;
  return holder.start_time == 0 || st->start_time == holder.start_time;
}

}  // namespace q
