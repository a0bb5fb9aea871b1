#include "bell.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <ctime>

namespace q::store {
namespace {

constexpr std::size_t kPage = 4096;

std::atomic<std::uint32_t>* word(void* page) { return static_cast<std::atomic<std::uint32_t>*>(page); }

}  // namespace

std::unique_ptr<Bell> Bell::open(const std::string& queue_file) {
  // 0666 & ~umask, as LMDB's lock file: whoever may use the queue may ring.
  int fd = ::open((queue_file + "-wake").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (fstat(fd, &st) != 0 || (st.st_size < static_cast<off_t>(kPage) && ftruncate(fd, kPage) != 0)) {
    ::close(fd);
    return nullptr;
  }
  void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<Bell>(new Bell(fd, page));
}

Bell::~Bell() {
  munmap(page_, kPage);
  ::close(fd_);
}

std::uint32_t Bell::rings() const { return word(page_)->load(std::memory_order_acquire); }

void Bell::ring() {
  word(page_)->fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, page_, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void Bell::wait(std::uint32_t seen, Millis ms) const {
  if (ms <= 0) return;
  timespec timeout{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1'000'000};
  // Returns at once (EAGAIN) when the counter already moved on.
  syscall(SYS_futex, page_, FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

}  // namespace q::store
