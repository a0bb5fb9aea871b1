// LD_PRELOAD shim for the watchdog scenario: burns CPU in a q process's file
// writes (LMDB writes its pages at commit), so that one LMDB call takes
// seconds of CPU, with or without progress meanwhile.
//
//   Q_BURN_MS=N        before each buffer written (writev/pwritev are split
//                      into one write per buffer), burn N ms of CPU, until
//                      Q_BURN_TOTAL_MS (default 4000) are burnt: a long
//                      commit that makes progress all along
//   Q_BURN_ONCE_MS=N   burn N ms of CPU once, in the first write, writing
//                      nothing meanwhile: a call that makes no progress
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void burn(long long ms) {
  long long until = cpu_ms() + ms;
  volatile unsigned long spin = 0;
  while (cpu_ms() < until)
    for (int i = 0; i < 10000; ++i) spin = spin + 1;
}

static long long env_ms(const char *name, long long fallback) {
  const char *v = getenv(name);
  return v && *v ? atoll(v) : fallback;
}

static void before_write(void) {
  static long long burnt;
  static int once_done;
  long long once = env_ms("Q_BURN_ONCE_MS", 0);
  if (once > 0 && !once_done) {
    once_done = 1;
    burn(once);
    return;
  }
  long long each = env_ms("Q_BURN_MS", 0);
  if (each > 0 && burnt < env_ms("Q_BURN_TOTAL_MS", 4000)) {
    burn(each);
    burnt += each;
  }
}

static ssize_t real_pwrite(int fd, const void *buf, size_t n, off_t at) {
  static ssize_t (*real)(int, const void *, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
  return real(fd, buf, n, at);
}

static ssize_t real_write(int fd, const void *buf, size_t n) {
  static ssize_t (*real)(int, const void *, size_t);
  if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  return real(fd, buf, n);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at) {
  before_write();
  return real_pwrite(fd, buf, n, at);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) { return pwrite64(fd, buf, n, at); }

// One buffer at a time, each whole (short writes continued), so that the
// burn is spread between real writes.
static ssize_t split(int fd, const struct iovec *iov, int count, off_t at, int positioned) {
  ssize_t total = 0;
  for (int i = 0; i < count; ++i) {
    before_write();
    size_t done = 0;
    while (done < iov[i].iov_len) {
      const char *p = (const char *)iov[i].iov_base + done;
      ssize_t w = positioned ? real_pwrite(fd, p, iov[i].iov_len - done, at + total)
                             : real_write(fd, p, iov[i].iov_len - done);
      if (w < 0) return total > 0 ? total : w;
      done += (size_t)w;
      total += w;
    }
  }
  return total;
}

ssize_t writev(int fd, const struct iovec *iov, int count) { return split(fd, iov, count, 0, 0); }
ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t at) {
  return split(fd, iov, count, at, 1);
}
ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t at) {
  return split(fd, iov, count, at, 1);
}
