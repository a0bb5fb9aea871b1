// LD_PRELOAD shim for the power-loss scenario: journals every write to the
// queue file, and every point at which writes became durable, so that
// powercut.py can rebuild the file as a power cut may have left it: everything
// durable, and any subset of the writes that were not yet.
//
//   Q_PL_TARGET=PATH    the queue file (as q is given it)
//   Q_PL_JOURNAL=PATH   the journal, appended to by every process
//
// Journal records (little-endian):
//   'W' u64 offset u64 length bytes   a write (logged before it is made)
//   'D' u64 offset u64 length bytes   a write through an O_DSYNC/O_SYNC descriptor:
//                                     durable itself once made (logged after it)
//   'S'                               fsync/fdatasync of the file returned 0: every
//                                     write logged before is durable
//   'T' u64 length                    ftruncate
// Data writes are made under q's writer lock, so records of different processes
// do not interleave; each record is one write(2) on an O_APPEND descriptor.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 4096
static unsigned char tracked[MAX_FD];  // 0: no, 1: data file, 2: data file, O_DSYNC
static int journal = -1;

static int journal_fd(void) {
  if (journal < 0) {
    const char *path = getenv("Q_PL_JOURNAL");
    if (!path) return -1;
    journal = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  }
  return journal;
}

static void log_record(char type, uint64_t offset, const struct iovec *iov, int n) {
  int j = journal_fd();
  if (j < 0) return;
  uint64_t length = 0;
  for (int i = 0; i < n; ++i) length += iov[i].iov_len;
  size_t header = 1 + (type == 'S' ? 0 : type == 'T' ? 8 : 16);
  size_t total = header + (type == 'W' || type == 'D' ? length : 0);
  char *buf = malloc(total);
  if (!buf) return;
  buf[0] = type;
  if (type == 'T') memcpy(buf + 1, &offset, 8);
  if (type == 'W' || type == 'D') {
    memcpy(buf + 1, &offset, 8);
    memcpy(buf + 9, &length, 8);
    size_t at = header;
    for (int i = 0; i < n; ++i) {
      memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
      at += iov[i].iov_len;
    }
  }
  size_t done = 0;
  while (done < total) {
    ssize_t w = syscall(SYS_write, j, buf + done, total - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  free(buf);
}

static int is_target(const char *path) {
  const char *target = getenv("Q_PL_TARGET");
  return target && path && strcmp(path, target) == 0;
}

static void track(int fd, const char *path, int flags) {
  if (fd >= 0 && fd < MAX_FD) tracked[fd] = is_target(path) ? ((flags & (O_DSYNC | O_SYNC)) ? 2 : 1) : 0;
}

#define REAL(name) \
  static __typeof__(&name) real_##name; \
  if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

static int do_open(int dirfd, const char *path, int flags, mode_t mode, int at) {
  int fd;
  if (at) {
    REAL(openat);
    fd = real_openat(dirfd, path, flags, mode);
  } else {
    REAL(open);
    fd = real_open(path, flags, mode);
  }
  track(fd, path, flags);
  return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
  va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
  return do_open(AT_FDCWD, path, flags, m, 0);
}
int open64(const char *path, int flags, ...) {
  va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
  return do_open(AT_FDCWD, path, flags, m, 0);
}
int openat(int dirfd, const char *path, int flags, ...) {
  va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
  return do_open(dirfd, path, flags, m, 1);
}
int openat64(int dirfd, const char *path, int flags, ...) {
  va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
  return do_open(dirfd, path, flags, m, 1);
}

int close(int fd) {
  REAL(close);
  if (fd >= 0 && fd < MAX_FD) tracked[fd] = 0;
  return real_close(fd);
}

static int kind(int fd) { return fd >= 0 && fd < MAX_FD ? tracked[fd] : 0; }

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
  REAL(pwrite);
  int k = kind(fd);
  struct iovec iov = {(void *)buf, count};
  if (k == 1) log_record('W', (uint64_t)offset, &iov, 1);
  ssize_t r = real_pwrite(fd, buf, count, offset);
  if (k == 2 && r > 0) { iov.iov_len = (size_t)r; log_record('D', (uint64_t)offset, &iov, 1); }
  return r;
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
  return pwrite(fd, buf, count, offset);
}

ssize_t write(int fd, const void *buf, size_t count) {
  REAL(write);
  int k = kind(fd);
  off_t offset = k ? lseek(fd, 0, SEEK_CUR) : 0;
  struct iovec iov = {(void *)buf, count};
  if (k == 1) log_record('W', (uint64_t)offset, &iov, 1);
  ssize_t r = real_write(fd, buf, count);
  if (k == 2 && r > 0) { iov.iov_len = (size_t)r; log_record('D', (uint64_t)offset, &iov, 1); }
  return r;
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
  REAL(writev);
  int k = kind(fd);
  off_t offset = k ? lseek(fd, 0, SEEK_CUR) : 0;
  if (k == 1) log_record('W', (uint64_t)offset, iov, n);
  ssize_t r = real_writev(fd, iov, n);
  if (k == 2 && r > 0) log_record('D', (uint64_t)offset, iov, n);
  return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t offset) {
  REAL(pwritev);
  int k = kind(fd);
  if (k == 1) log_record('W', (uint64_t)offset, iov, n);
  ssize_t r = real_pwritev(fd, iov, n, offset);
  if (k == 2 && r > 0) log_record('D', (uint64_t)offset, iov, n);
  return r;
}
ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t offset) {
  return pwritev(fd, iov, n, offset);
}

int fdatasync(int fd) {
  REAL(fdatasync);
  int r = real_fdatasync(fd);
  if (r == 0 && kind(fd)) log_record('S', 0, NULL, 0);
  return r;
}

int fsync(int fd) {
  REAL(fsync);
  int r = real_fsync(fd);
  if (r == 0 && kind(fd)) log_record('S', 0, NULL, 0);
  return r;
}

int ftruncate(int fd, off_t length) {
  REAL(ftruncate);
  int r = real_ftruncate(fd, length);
  if (r == 0 && kind(fd)) log_record('T', (uint64_t)length, NULL, 0);
  return r;
}
int ftruncate64(int fd, off_t length) { return ftruncate(fd, length); }
