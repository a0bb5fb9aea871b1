#include "libq/lmdb/file_watch.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>

namespace q {

FileWatch::FileWatch(const std::string& path) {
  fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd_ >= 0 && inotify_add_watch(fd_, path.c_str(), IN_ATTRIB) < 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

FileWatch::~FileWatch() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWatch::drain() {
  char buf[4096];
  while (fd_ >= 0 && ::read(fd_, buf, sizeof buf) > 0) {
  }
}

void FileWatch::wait(Millis ms) {
  if (ms <= 0) return;
  if (fd_ < 0) {
    // No inotify (limits reached): fall back to a short poll.
    ::usleep(static_cast<useconds_t>(std::min<Millis>(ms, 50) * 1000));
    return;
  }
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(std::min<Millis>(ms, 60 * kSecond))) > 0) drain();
}

}  // namespace q
