#include "libq/holder.hpp"
#include "libq/descendants.hpp"

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

// A start time is clock ticks since boot (100 a second): bits 0-39 last 348
// years. Bits 40-63 hold the low 24 bits of the holder's pid namespace inode.
constexpr std::uint64_t kStartTicks = (std::uint64_t{1} << 40) - 1;
std::uint64_t namespace_tag(std::uint64_t ns) { return (ns & 0xffffff) << 40; }

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
  // The start time carries the namespace's tag: two holders of one pid and
  // start tick in two PID namespaces are two holders (issue 25 item 10).
  auto ns = pid_namespace("/proc/self");
  return Holder{pid, st->start_time | namespace_tag(ns), ns};
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
  return holder.start_time == 0 || st->start_time == (holder.start_time & kStartTicks);
}

namespace {

// Far above the bytes anyone else might lock; one byte per pid (below 2^22)
// in each pid namespace (the low 32 bits of its inode).
constexpr off_t kDescendantsBase = off_t{1} << 40;

struct flock descendants_byte(const Holder& holder, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = kDescendantsBase + static_cast<off_t>((holder.pid_namespace & 0xffffffffu) << 22) +
                 static_cast<off_t>(holder.pid & 0x3fffff);
  lock.l_len = 1;
  return lock;
}

}  // namespace

int hold_descendants(const std::string& queue_file, const Holder& holder) {
  int fd = ::open((queue_file + "-wake").c_str(), O_RDONLY | O_NOFOLLOW);
  if (fd < 0) return -1;
  auto lock = descendants_byte(holder, F_RDLCK);
  if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool descendants_alive(const std::string& queue_file, const Holder& holder) {
  int fd = ::open((queue_file + "-wake").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  auto lock = descendants_byte(holder, F_WRLCK);
  bool held = ::fcntl(fd, F_OFD_GETLK, &lock) == 0 && lock.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

}  // namespace q
