#include "libq/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "libq/error.hpp"

namespace q::files {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

[[noreturn]] void refuse(const std::string& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode))
    throw Error(ErrorKind::Io,
                fmt::format("{}: is a symbolic link; q never follows a link beside a queue file "
                            "(it could make q write another file): remove it",
                            path));
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::Io, fmt::format("{}: is not a regular file ({}): remove it", path,
                                           kind_of(st.st_mode)));
  throw Error(ErrorKind::Io,
              fmt::format("{}: has {} hard links; q refuses to write a file that is also "
                          "another file (a link could make q write it): remove it",
                          path, st.st_nlink));
}

bool safe(const struct stat& st) { return S_ISREG(st.st_mode) && st.st_nlink == 1; }

const std::string kTempInfix = ".tmp-";

}  // namespace

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void refuse_unsafe_companion(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !safe(st)) refuse(path, st);
}

int open_companion(const std::string& path, bool writable, bool create, mode_t mode) {
  // Look first, so that a device or FIFO is never opened (opening some
  // devices has effects); O_NOFOLLOW and the fstat below are what holds
  // against a swap after this look.
  refuse_unsafe_companion(path);
  int flags = (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  if (create && writable) flags |= O_CREAT;
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    struct stat st {};
    if (errno == ELOOP && lstat(path.c_str(), &st) == 0) refuse(path, st);
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !safe(st)) {
    int err = errno;
    ::close(fd);
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1) refuse(path, st);
    errno = err;
    return -1;
  }
  // Back to blocking I/O for the regular file it turned out to be.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int create_temp_beside(const std::string& target, mode_t mode, std::string& temp_path) {
  temp_path = target + kTempInfix + std::to_string(getpid());
  // A file of this name is a leftover of an earlier process with this pid
  // (this process has not made it): unlink removes a link, never its target.
  ::unlink(temp_path.c_str());
  int fd = ::open(temp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  flock(fd, LOCK_EX | LOCK_NB);  // released by the kernel when this process ends
  return fd;
}

void remove_stale_temps(const std::string& target) {
  const std::string dir = parent_dir(target);
  const std::string prefix = base_name(target) + kTempInfix;
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return;
  DIR* listing = fdopendir(dup(dir_fd));
  if (!listing) {
    ::close(dir_fd);
    return;
  }
  while (dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos ||
        digits[0] == '0')
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or unknown
    int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat held {
    }, now{};
    // Still locked: a process in another pid namespace is writing it.
    const bool stale = fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && held.st_uid == geteuid() &&
                       flock(fd, LOCK_EX | LOCK_NB) == 0;
    // Unlink only the file looked at (the name could have been replaced since).
    if (stale && fstatat(dir_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_dev == held.st_dev && now.st_ino == held.st_ino)
      unlinkat(dir_fd, name.c_str(), 0);
    ::close(fd);
  }
  closedir(listing);
  ::close(dir_fd);
}

bool write_all(int fd, std::string_view data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

AtomicFile::AtomicFile(std::string target, mode_t mode) : target_(std::move(target)) {
  remove_stale_temps(target_);
  fd_ = create_temp_beside(target_, mode, temporary_);
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() {
  if (fd_ < 0) return;
  int saved = errno;
  ::close(fd_);
  ::unlink(temporary_.c_str());
  fd_ = -1;
  errno = saved;
}

bool AtomicFile::commit(bool durable) {
  if (fd_ < 0) return false;
  if (durable && ::fsync(fd_) != 0) {
    abandon();
    return false;
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || ::rename(temporary_.c_str(), target_.c_str()) != 0) {
    int err = errno;
    ::unlink(temporary_.c_str());
    errno = err;
    return false;
  }
  if (durable) {
    int dir = ::open(parent_dir(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  return true;
}

}  // namespace q::files
