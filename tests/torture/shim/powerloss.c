// LD_PRELOAD shim for the power-loss scenario: journals every write to the
// queue file, and every point at which writes became durable, so that
// powercut.py can rebuild the file as a power cut may have left it: everything
// durable, and any subset of the writes that were not yet.
//
//   Q_PL_TARGET=PATH    the queue file (it must exist before it is written)
//   Q_PL_JOURNAL=PATH   the journal, appended to by every process
//
// The durability model (what a power cut may not undo):
// - fsync/fdatasync of ANY descriptor of the file, once it returns 0, makes
//   every write made to the file before it durable, whichever descriptor (or
//   process) made it;
// - a write through a descriptor opened with O_DSYNC or O_SYNC is durable once
//   it returns (that write only: LMDB writes its meta page that way, through
//   its second descriptor me_mfd, in mdb_env_write_meta);
// - sync(), and syncfs() of a descriptor on the file's filesystem, count as a
//   sync of the file; a sync of any other file does not;
// - nothing else: whatever was written since may reach the disk in any subset
//   of 4 KiB pages, or not at all.
// The file is recognised by its identity (device and inode, by fstat), not by
// the path it was opened with, so every descriptor counts: duplicated,
// inherited, or opened by another spelling of the path. Directory entries are
// not journaled: the file must exist, with its directory entry durable, before
// the journal starts (power_loss.sh syncs the file and its directory).
//
// Journal records (little-endian):
//   'W' u64 offset u64 length bytes   a write to the file, logged before it is
//                                     made (it may or may not be made: a cut
//                                     may come inside it)
//   'C' u64 offset u64 done           that write (the last 'W' at offset) returned,
//                                     having made `done` bytes (fewer: short or failed)
//   'D' u64 offset u64 done           that write went through an O_DSYNC/O_SYNC
//                                     descriptor and returned: its `done` bytes
//                                     are durable
//   'S'                               a sync of the file returned 0: every write
//                                     logged before it is durable
//   'T' u64 length                    ftruncate (logged once it succeeded)
//   'X'                               the file was mapped shared and writable: the
//                                     shim cannot see writes through a map, and
//                                     powercut.py refuses the journal
// Why before: a process killed inside a write leaves its 'W' without 'C', and
// the write counts as maybe made, which is the truth. An O_DSYNC write
// (LMDB's meta page) blocks until the disk has it, so the cut often falls
// inside one: its bytes are in the page cache, maybe on the disk, and the
// process never returned. (A write logged after returning would be missing
// from the journal then, and only the "not made" outcome would be tried.)
// Data writes are made under q's (LMDB's) writer lock, so the records of one
// write ('W', then 'C', and 'D') are not interleaved with another write's; each
// record is one write(2) on an O_APPEND descriptor.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int journal = -1;

static int journal_fd(void) {
  int j = __atomic_load_n(&journal, __ATOMIC_ACQUIRE);
  if (j >= 0) return j;
  const char *path = getenv("Q_PL_JOURNAL");
  if (!path) return -1;
  j = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (j < 0) return -1;
  int none = -1;
  if (!__atomic_compare_exchange_n(&journal, &none, j, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    syscall(SYS_close, j);  // another thread won the race
    j = none;
  }
  return j;
}

// One record: TYPE, then NUMS (0, 1 or 2) of the numbers A and B, then the
// bytes of IOV (N entries).
static void log_record(char type, int nums, uint64_t a, uint64_t b, const struct iovec *iov,
                       int n) {
  int saved = errno;
  int j = journal_fd();
  if (j < 0) {
    errno = saved;
    return;
  }
  uint64_t length = 0;
  for (int i = 0; i < n; ++i) length += iov[i].iov_len;
  size_t total = 1 + 8 * (size_t)nums + length;
  char *buf = malloc(total);
  if (!buf) {
    errno = saved;
    return;
  }
  buf[0] = type;
  if (nums >= 1) memcpy(buf + 1, &a, 8);
  if (nums >= 2) memcpy(buf + 9, &b, 8);
  size_t at = 1 + 8 * (size_t)nums;
  for (int i = 0; i < n; ++i) {
    memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  size_t done = 0;
  while (done < total) {
    ssize_t w = syscall(SYS_write, j, buf + done, total - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  free(buf);
  errno = saved;
}

// The identity of the target file, looked up once it exists.
static int target_known;
static dev_t target_dev;
static ino_t target_ino;

static int target(void) {
  if (__atomic_load_n(&target_known, __ATOMIC_ACQUIRE)) return 1;
  const char *path = getenv("Q_PL_TARGET");
  struct stat st;
  if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  target_dev = st.st_dev;
  target_ino = st.st_ino;
  __atomic_store_n(&target_known, 1, __ATOMIC_RELEASE);
  return 1;
}

enum { OTHER = 0, PLAIN = 1, DSYNC = 2 };

// What FD is: the target file (opened with or without O_DSYNC/O_SYNC), or
// anything else. *append_at: the file's size when FD is O_APPEND, else -1.
static int kind(int fd, off_t *append_at) {
  if (append_at) *append_at = -1;
  if (fd < 0 || !target()) return OTHER;
  int saved = errno;
  struct stat st;
  int k = OTHER;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == target_dev &&
      st.st_ino == target_ino) {
    int fl = fcntl(fd, F_GETFL);
    k = (fl >= 0 && (fl & O_DSYNC)) ? DSYNC : PLAIN;  // O_SYNC includes O_DSYNC's bit
    if (append_at && fl >= 0 && (fl & O_APPEND)) *append_at = st.st_size;
  }
  errno = saved;
  return k;
}

// Whether FD is on the target file's filesystem (for syncfs).
static int same_fs(int fd) {
  if (fd < 0 || !target()) return 0;
  int saved = errno;
  struct stat st;
  int r = fstat(fd, &st) == 0 && st.st_dev == target_dev;
  errno = saved;
  return r;
}

#define REAL(name)                      \
  static __typeof__(&name) real_##name; \
  if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

// Around a write of the target at OFFSET: 'W' before, with the bytes it is
// to write; once it returned R, 'C', and 'D' when it went through an
// O_DSYNC/O_SYNC descriptor.
static void before_write(int k, uint64_t offset, const struct iovec *iov, int n) {
  if (k == OTHER) return;
  uint64_t wanted = 0;
  for (int i = 0; i < n; ++i) wanted += iov[i].iov_len;
  log_record('W', 2, offset, wanted, iov, n);
}
static void after_write(int k, uint64_t offset, const struct iovec *iov, int n, ssize_t r) {
  if (k == OTHER) return;
  (void)iov;
  (void)n;
  uint64_t done = r > 0 ? (uint64_t)r : 0;
  log_record('C', 2, offset, done, NULL, 0);
  if (k == DSYNC && done > 0) log_record('D', 2, offset, done, NULL, 0);
}

static uint64_t current_offset(int fd, off_t append_at) {
  if (append_at >= 0) return (uint64_t)append_at;
  int saved = errno;
  off_t at = lseek(fd, 0, SEEK_CUR);
  errno = saved;
  return at < 0 ? 0 : (uint64_t)at;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
  REAL(pwrite);
  int k = kind(fd, NULL);
  struct iovec iov = {(void *)buf, count};
  before_write(k, (uint64_t)offset, &iov, 1);
  ssize_t r = real_pwrite(fd, buf, count, offset);
  after_write(k, (uint64_t)offset, &iov, 1, r);
  return r;
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
  return pwrite(fd, buf, count, offset);
}

ssize_t write(int fd, const void *buf, size_t count) {
  REAL(write);
  off_t append_at;
  int k = kind(fd, &append_at);
  uint64_t offset = k ? current_offset(fd, append_at) : 0;
  struct iovec iov = {(void *)buf, count};
  before_write(k, offset, &iov, 1);
  ssize_t r = real_write(fd, buf, count);
  after_write(k, offset, &iov, 1, r);
  return r;
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
  REAL(writev);
  off_t append_at;
  int k = kind(fd, &append_at);
  uint64_t offset = k ? current_offset(fd, append_at) : 0;
  before_write(k, offset, iov, n);
  ssize_t r = real_writev(fd, iov, n);
  after_write(k, offset, iov, n, r);
  return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t offset) {
  REAL(pwritev);
  int k = kind(fd, NULL);
  before_write(k, (uint64_t)offset, iov, n);
  ssize_t r = real_pwritev(fd, iov, n, offset);
  after_write(k, (uint64_t)offset, iov, n, r);
  return r;
}
ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t offset) {
  return pwritev(fd, iov, n, offset);
}

int fdatasync(int fd) {
  REAL(fdatasync);
  int k = kind(fd, NULL);
  int r = real_fdatasync(fd);
  if (r == 0 && k) log_record('S', 0, 0, 0, NULL, 0);
  return r;
}

int fsync(int fd) {
  REAL(fsync);
  int k = kind(fd, NULL);
  int r = real_fsync(fd);
  if (r == 0 && k) log_record('S', 0, 0, 0, NULL, 0);
  return r;
}

int syncfs(int fd) {
  REAL(syncfs);
  int same = same_fs(fd);
  int r = real_syncfs(fd);
  if (r == 0 && same) log_record('S', 0, 0, 0, NULL, 0);
  return r;
}

void sync(void) {
  REAL(sync);
  real_sync();
  if (target()) log_record('S', 0, 0, 0, NULL, 0);
}

int ftruncate(int fd, off_t length) {
  REAL(ftruncate);
  int k = kind(fd, NULL);
  int r = real_ftruncate(fd, length);
  if (r == 0 && k) log_record('T', 1, (uint64_t)length, 0, NULL, 0);
  return r;
}
int ftruncate64(int fd, off_t length) { return ftruncate(fd, length); }

// Writes through a shared writable map of the file (LMDB's MDB_WRITEMAP) would
// bypass the journal: say so, rather than model a file that is not the real one.
void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  REAL(mmap);
  if ((prot & PROT_WRITE) && (flags & MAP_SHARED) && kind(fd, NULL))
    log_record('X', 0, 0, 0, NULL, 0);
  return real_mmap(addr, length, prot, flags, fd, offset);
}
void *mmap64(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  return mmap(addr, length, prot, flags, fd, offset);
}
