#include "libq/lmdb/bell.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <ctime>

#include "libq/error.hpp"
#include "libq/files.hpp"

namespace q::store {
namespace {

constexpr std::size_t kPage = 4096;

std::atomic<std::uint32_t>* word(void* page) {
  return static_cast<std::atomic<std::uint32_t>*>(page);
}

bool access_error(int err) { return err == EACCES || err == EPERM || err == EROFS; }

// FILE-wake, read-write when this user may (created when missing), else
// read-only; -1 when neither.
int open_doorbell(const std::string& path, bool& writable) {
  writable = true;
  int fd = files::open_companion(path, true, true);  // 0666 & ~umask, as LMDB's lock file
  if (fd < 0 && access_error(errno)) {
    writable = false;
    fd = files::open_companion(path, false, false);
  }
  return fd;
}

}  // namespace

std::unique_ptr<Bell> Bell::open(const std::string& queue_file, int data_fd) {
  std::unique_ptr<Bell> bell(new Bell(queue_file + "-wake", data_fd));
  bool writable = false;
  int fd = open_doorbell(bell->path_, writable);
  if (fd < 0 || !bell->map(fd, writable)) return nullptr;
  return bell;
}

bool Bell::map(int fd, bool writable) const {
  struct stat st {};
  if (fstat(fd, &st) != 0 ||
      (st.st_size < static_cast<off_t>(kPage) && (!writable || ftruncate(fd, kPage) != 0))) {
    ::close(fd);
    return false;
  }
  void* page =
      mmap(nullptr, kPage, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    ::close(fd);
    return false;
  }
  unmap();
  fd_ = fd;
  page_ = page;
  writable_ = writable;
  return true;
}

void Bell::unmap() const {
  if (page_) munmap(page_, kPage);
  if (fd_ >= 0) ::close(fd_);
  page_ = nullptr;
  fd_ = -1;
}

Bell::~Bell() { unmap(); }

bool Bell::gone() const {
  struct stat st {};
  return fstat(fd_, &st) == 0 && st.st_nlink == 0;
}

void Bell::reopen() const {
  bool writable = false;
  int fd = -1;
  try {
    fd = open_doorbell(path_, writable);
  } catch (const Error&) {
    return;  // a link planted meanwhile: keep the old bell, and the slices
  }
  if (fd >= 0) map(fd, writable);
}

bool Bell::file_touched() const {
  struct stat st {};
  if (fstat(data_fd_, &st) != 0) return false;
  return st.st_ctim.tv_sec != seen_ctime_.tv_sec || st.st_ctim.tv_nsec != seen_ctime_.tv_nsec;
}

std::uint32_t Bell::rings() const {
  struct stat st {};
  if (fstat(data_fd_, &st) == 0) seen_ctime_ = st.st_ctim;
  return word(page_)->load(std::memory_order_acquire);
}

void Bell::ring() {
  if (gone()) reopen();  // deleted or replaced: waiters wait on the new one
  if (writable_) word(page_)->fetch_add(1, std::memory_order_release);
  // FUTEX_WAKE needs only a mapping, not write permission.
  syscall(SYS_futex, page_, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void Bell::wait(std::uint32_t seen, Millis ms) const {
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + std::chrono::milliseconds(std::max<Millis>(ms, 0));
  for (;;) {
    const Millis left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now()).count();
    if (left <= 0) return;
    const Millis slice = std::min(left, kSlice);
    timespec timeout{static_cast<time_t>(slice / 1000),
                     static_cast<long>(slice % 1000) * 1'000'000};
    // Returns at once (EAGAIN) when the counter already moved on; 0 when woken.
    long rc = syscall(SYS_futex, page_, FUTEX_WAIT, seen, &timeout, nullptr, 0);
    if (rc == 0 || errno != ETIMEDOUT) return;
    if (file_touched()) return;
    if (gone()) {
      reopen();
      return;
    }
  }
}

}  // namespace q::store
