#include "libq/lmdb/store.hpp"
#include "libq/lmdb/env_detail.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "libq/files.hpp"
#include "libq/lmdb/upgrade.hpp"
#include "libq/lmdb/records.hpp"

namespace q::store {

LmdbActivity g_lmdb_activity;

namespace {

NoticeHandler g_notice = nullptr;

using files::parent_dir;

bool disk_nearly_full(const std::string& path) {
  struct statvfs vfs {};
  if (statvfs(parent_dir(path).c_str(), &vfs) != 0) return false;
  return static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize < 64ull * 1024 * 1024;
}

// The file size limit (ulimit -f) when the file has (nearly) reached it, else 0.
// A write across the limit is cut short, which LMDB reports as EIO.
unsigned long long file_size_limit_reached(int fd) {
  struct rlimit limit {};
  struct stat st {};
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  if (fstat(fd, &st) != 0) return 0;
  const unsigned long long size = st.st_size;
  return size + 64 * 1024 >= limit.rlim_cur ? limit.rlim_cur : 0;
}

}  // namespace

bool on_read_only_mount(const std::string& path) {
  struct statvfs vfs {};
  return statvfs(path.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0;
}

Error read_only_mount(const std::string& path) {
  return Error(ErrorKind::ReadOnly,
               fmt::format("{}: the queue file is on a read-only file system (mounted read-only): "
                           "it can be read, not changed",
                           path));
}

void fail_errno(int err, const std::string& path, const std::string& doing) {
  ErrorKind kind = ErrorKind::Io;
  if (err == EACCES || err == EPERM) kind = ErrorKind::Permission;
  if (err == EROFS) kind = ErrorKind::ReadOnly;
  if (err == ENOENT) kind = ErrorKind::NotFound;
  throw Error(kind, fmt::format("{}: {}: {}", path, doing, std::strerror(err)));
}

std::string describe_owner(const struct stat& st) {
  return fmt::format("mode {:04o}, owner uid {} gid {}", st.st_mode & 07777, st.st_uid, st.st_gid);
}

void fail_access(const std::string& path, const std::string& doing) {
  const std::string lock = path + "-lock";
  const std::string dir = parent_dir(path);
  const std::string who = fmt::format("uid {} gid {}", geteuid(), getegid());
  const std::string share = fmt::format(
      "q needs read and write permission on {}, {} and {}-wake, even to read; to share a "
      "queue, give its group write permission (chmod g+w) or create it with umask 007",
      path, lock, path);
  struct stat st {};
  for (const std::string* file : {&path, &lock}) {
    if (stat(file->c_str(), &st) != 0) continue;
    if (faccessat(AT_FDCWD, file->c_str(), R_OK | W_OK, AT_EACCESS) == 0) continue;
    throw Error(ErrorKind::Permission,
                fmt::format("{}: {}: permission denied: no write permission for this user ({}; "
                            "the file has {}); {}",
                            *file, doing, who, describe_owner(st), share));
  }
  const bool file_exists = stat(path.c_str(), &st) == 0;
  const bool lock_exists = stat(lock.c_str(), &st) == 0;
  if ((!file_exists || !lock_exists) && stat(dir.c_str(), &st) == 0 &&
      faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    throw Error(ErrorKind::Permission,
                fmt::format("{}: {}: permission denied: no write permission to create {} in "
                            "the directory {} for this user ({}; the directory has {})",
                            path, doing, file_exists ? "the lock file" : "it", dir, who,
                            describe_owner(st)));
  throw Error(ErrorKind::Permission,
              fmt::format("{}: {}: permission denied (for {})", path, doing, who));
}

void set_notice_handler(NoticeHandler handler) { g_notice = handler; }
NoticeHandler notice_handler() { return g_notice; }

// ---- Env --------------------------------------------------------------------
void Env::drop_mapped_pages() const {
  // LMDB does not tell where it mapped the file (me_mapaddr is only set with
  // MDB_FIXEDMAP), so the mapping is found once in /proc/self/maps by the data
  // file's device and inode. The map never moves: the map size is fixed at open.
  if (!map_found_) {
    map_found_ = true;
    int fd = -1;
    struct stat st {};
    if (mdb_env_get_fd(env_, &fd) != 0 || ::fstat(fd, &st) != 0) return;
    std::FILE* maps = std::fopen("/proc/self/maps", "re");
    if (!maps) return;
    char line[512];
    while (std::fgets(line, sizeof line, maps)) {
      unsigned long from = 0, to = 0, inode = 0, offset = 0;
      unsigned major = 0, minor = 0;
      char perms[8] = {};
      if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &from, &to, perms, &offset, &major, &minor,
                      &inode) == 7 &&
          inode == st.st_ino && makedev(major, minor) == st.st_dev && offset == 0 &&
          to - from > map_length_) {
        map_address_ = reinterpret_cast<void*>(from);
        map_length_ = to - from;
      }
    }
    std::fclose(maps);
  }
  // Advice only: a failure leaves the pages mapped, which is merely bigger.
  if (map_address_) ::madvise(map_address_, map_length_, MADV_DONTNEED);
}

Env::~Env() {
  // A damaged environment is abandoned, not closed (see damaged()); kept
  // reachable so that leak checkers do not report it.
  static std::vector<MDB_env*> abandoned;
  if (env_ && damaged_) abandoned.push_back(env_);
  bell_.reset();
  if (env_ && !damaged_) mdb_env_close(env_);
  if (lock_fd_ >= 0 && !damaged_) ::close(lock_fd_);  // after LMDB's (see lock_fd_)
  if (fd_ >= 0) ::close(fd_);
  if (!staging_.empty()) ::unlink(staging_.c_str());  // never published: no file was made
  if (dir_fd_ >= 0) ::close(dir_fd_);
}
std::optional<MDB_dbi> Env::holders(Txn& txn, bool create) {
  if (holders_open_ || holders_pending_) return holders_dbi_;
  // The transaction that found none: nothing has changed within it.
  std::size_t id = mdb_txn_id(txn.handle());
  if (!create && id == holders_absent_at_) return std::nullopt;
  MDB_dbi dbi;
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_dbi_open(txn.handle(), "holders", create ? MDB_CREATE : 0, &dbi);
  }
  if (rc == MDB_NOTFOUND) {
    holders_absent_at_ = id;
    return std::nullopt;
  }
  if (rc != 0) fail(rc, "cannot open database holders");
  // A handle opened in a read transaction closes with it; one opened in a
  // write transaction stays once it commits.
  if (txn.writes()) {
    holders_dbi_ = dbi;
    holders_pending_ = true;
  }
  return dbi;
}

// Ctrl-Z (SIGTSTP), and SIGTTIN/SIGTTOU, are held while this process holds
// the writer lock (issue 25 item 11): stopped inside its transaction, it
// would make every other writer wait for it, then exit 69. Held pending, the
// signal stops the process once the lock is given up; SIGCONT resumes it.
// (SIGSTOP cannot be held: `kill -STOP` still stops a writer where it is.)
namespace {
// The signal mask before lock_writer, restored by unlock_writer (one writer
// lock per thread at a time).
thread_local sigset_t t_unlocked_mask;
}  // namespace

void Env::lock_writer() {
  lock_bounded(fd_, options_.path);
  sigset_t job_control;
  sigemptyset(&job_control);
  for (int signo : {SIGTSTP, SIGTTIN, SIGTTOU}) sigaddset(&job_control, signo);
  pthread_sigmask(SIG_BLOCK, &job_control, &t_unlocked_mask);
}

// Counted: a read transaction begun while another of this process is open
// (one flock per descriptor) must not end the first one's lock with its own.
void Env::lock_snapshot() {
  if (snapshots_ == 0) lock_bounded(fd_, options_.path, true);
  ++snapshots_;
}
void Env::unlock_snapshot() {
  if (snapshots_ > 0 && --snapshots_ == 0) flock(fd_, LOCK_UN);
}

void Env::lock_bounded(int fd, const std::string& what, bool shared) {
  const int how = shared ? LOCK_SH : LOCK_EX;
  if (flock(fd, how | LOCK_NB) == 0) return;
  if (errno != EWOULDBLOCK && errno != EINTR) fail_errno(errno, what, "cannot lock");
  // flock cannot time out, so poll with a short, growing pause. Contention ends
  // within a commit or two in normal operation; the bound is for a writer that
  // is stopped or hung.
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + std::chrono::milliseconds(options_.lock_timeout);
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    std::this_thread::sleep_for(pause);
    if (flock(fd, how | LOCK_NB) == 0) return;
    if (errno != EWOULDBLOCK && errno != EINTR) fail_errno(errno, what, "cannot lock");
    if (Steady::now() >= deadline)
      throw Error(ErrorKind::Busy,
                  fmt::format("{}: busy: another process has held the writer lock for over "
                              "{} ms (a stopped or hung q?); see --lock-timeout",
                              what, options_.lock_timeout));
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

// A reader killed inside its transaction pins the pages of its snapshot until
// its slot is cleared; a long-running process (q work) must clear such slots
// itself, as no other process may open the file meanwhile. Checking costs one
// fcntl per live reader, so it runs once a second, and at once whenever the
// file has grown since the last look: the sign of pages that cannot be reused.
void Env::clear_dead_readers_now_and_then() {
  MDB_envinfo info{};
  mdb_env_info(env_, &info);
  const bool grew = info.me_last_pgno > last_pgno_seen_;
  last_pgno_seen_ = info.me_last_pgno;
  const auto now = std::chrono::steady_clock::now();
  if (!grew && now < next_reader_check_) return;
  next_reader_check_ = now + kReaderCheckEvery;
  int dead = 0;
  mdb_reader_check(env_, &dead);
}

void Env::unlock_writer() {
  flock(fd_, LOCK_UN);
  pthread_sigmask(SIG_SETMASK, &t_unlocked_mask, nullptr);
}

// LMDB's own writes reach the file before readers can see the transaction (the
// reader table is updated after the last write), so a watcher woken by them
// could look too early: waiters are told only once the commit is visible.
void Env::announce_commit() {
  if (!staging_.empty()) return;  // nobody can be waiting on a file not yet published
  if (Bell* b = bell()) b->ring();
  // Also what a waiter whose doorbell fails sees (Bell::wait, FileWatch).
  futimens(fd_, nullptr);
}

// A writer that cannot ring the doorbell says so, once: its commits reach
// waiting receivers only through the file's times, up to Bell::kSlice late.
void Env::notice_bell_problem() {
  if (bell_noticed_ || !staging_.empty() || (bell_ && bell_->writable()) || !g_notice) return;
  bell_noticed_ = true;
  const std::string wake = options_.path + "-wake";
  struct stat st {};
  const std::string has =
      lstat(wake.c_str(), &st) == 0 ? fmt::format("; the file has {}", describe_owner(st)) : "";
  g_notice(
      fmt::format("{}: no write permission for this user (uid {} gid {}{}): receivers "
                  "waiting with --wait are not woken at once by this process's writes "
                  "(up to {} ms late); give it the permissions of {}",
                  wake, geteuid(), getegid(), has, Bell::kSlice, options_.path));
}

Bell* Env::bell() { return bell_.get(); }

void Env::refuse_if_replaced() {
  if (!staging_.empty() || fd_ < 0) return;  // not published yet: it has no name
  struct stat ours {
  }, named{};
  if (fstat(fd_, &ours) != 0) return;
  if (stat(options_.path.c_str(), &named) == 0) {
    if (same_file(ours, named)) return;
    throw Error(ErrorKind::Io,
                fmt::format("{}: the queue file was replaced by another file while this process "
                            "used it; start again to use the new file",
                            options_.path));
  }
  if (errno != ENOENT) return;
  throw Error(ErrorKind::Io,
              fmt::format("{}: the queue file was deleted while this process used it; start "
                          "again to use a new file of that name",
                          options_.path));
}

void Env::sync() {
  if (!options_.durable || options_.read_only) return;
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_env_sync(env_, 1);
  }
  if (rc != 0) fail(rc, "cannot sync");
}

void Env::fail(int rc, const std::string& doing) {
  const std::string& path = options_.path;
  switch (rc) {
    case EACCES:
    case EPERM: fail_access(path, doing);
    case EROFS:
      throw Error(ErrorKind::ReadOnly,
                  fmt::format("{}: {}: the file system is mounted read-only", path, doing));
    case ENOSPC:
    case EDQUOT: throw Error(ErrorKind::Io, fmt::format("{}: {}: disk full", path, doing));
    case EFBIG:
    case EIO:
      if (auto limit = file_size_limit_reached(fd_))
        throw Error(ErrorKind::Io,
                    fmt::format("{}: {}: disk full for this process: the file reached the file "
                                "size limit (ulimit -f) of {} bytes",
                                path, doing, limit));
      // LMDB reports a short write on a full disk as EIO.
      if (rc == EFBIG || disk_nearly_full(path))
        throw Error(ErrorKind::Io, fmt::format("{}: {}: disk full", path, doing));
      throw Error(ErrorKind::Io, fmt::format("{}: {}: I/O error", path, doing));
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
      damaged_ = true;
      g_lmdb_activity.damaged = 1;
      [[fallthrough]];
    case MDB_INVALID:
      throw Error(ErrorKind::Io,
                  fmt::format("{}: {}: the file is corrupt ({})", path, doing, mdb_strerror(rc)));
    case MDB_VERSION_MISMATCH:
      throw Error(ErrorKind::Io,
                  fmt::format("{}: {}: made by an incompatible LMDB version", path, doing));
    case MDB_READERS_FULL:
      throw Error(ErrorKind::Busy,
                  fmt::format("{}: {}: too many processes have the file open", path, doing));
    case MDB_MAP_FULL:
      throw Error(ErrorKind::Io,
                  fmt::format("{}: {}: the file reached its 1 TiB map size", path, doing));
    default: throw Error(ErrorKind::Io, fmt::format("{}: {}: {}", path, doing, mdb_strerror(rc)));
  }
}

// The queue's own files, by name (in the same directory) and by inode
// (through a link, symbolic or hard): a copy renamed over one of them would
// replace it under the processes using the file.
void Env::refuse_own_file(const std::string& target) {
  const std::string& path = options_.path;
  const std::pair<std::string, const char*> own[] = {
      {path, "the queue file itself"},
      {path + "-lock", "the queue file's lock file"},
      {path + "-wake", "the queue file's doorbell"},
      {path + ".creating", "the queue file's name while it is created"},
  };
  struct stat target_dir {
  }, our_dir{}, target_st{}, own_st{};
  const bool same_dir = stat(parent_dir(target).c_str(), &target_dir) == 0 &&
                        stat(parent_dir(path).c_str(), &our_dir) == 0 &&
                        same_file(target_dir, our_dir);
  const bool target_exists = stat(target.c_str(), &target_st) == 0;
  for (const auto& [name, what] : own) {
    const bool by_name = same_dir && files::base_name(name) == files::base_name(target);
    const bool by_inode =
        target_exists && stat(name.c_str(), &own_st) == 0 && same_file(own_st, target_st);
    if (by_name || by_inode)
      throw Error(ErrorKind::Usage,
                  fmt::format("{}: is {} ({}); a copy there would replace it: choose another "
                              "name",
                              target, what, name));
  }
}

void Env::copy_to(const std::string& target) {
  struct stat st {};
  if (!target.empty() &&
      (target.back() == '/' || (stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode))))
    throw Error(ErrorKind::Usage,
                fmt::format("{}: is a directory; name the copy's file, like {}{}{}", target, target,
                            target.back() == '/' ? "" : "/", files::base_name(options_.path)));
  refuse_own_file(target);
  struct stat source {};
  if (fstat(fd_, &source) != 0) fail_errno(errno, options_.path, "cannot stat queue file");

  // Leftovers of backups that were killed, then a temporary file of our own
  // that nobody else can read meanwhile (0600 until it has the source's mode).
  files::AtomicFile file(target, 0600);
  const int copy = file.fd();
  if (copy < 0) fail_errno(errno, target, "cannot write the copy");
  auto give_up = [&](int err, const std::string& doing) {
    if (err == ENOSPC || err == EDQUOT || err == EFBIG || err == EIO)
      throw Error(ErrorKind::Io, fmt::format("{}: {}: {}", target, doing,
                                             err == EIO ? "I/O error or disk full" : "disk full"));
    fail_errno(err, target, doing);
  };
  int rc = mdb_env_copyfd2(env_, copy, MDB_CP_COMPACT);
  if (rc != 0) {
    if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG || rc == EIO || rc == EACCES || rc == EPERM ||
        rc == EROFS)
      give_up(rc, "cannot write the copy");
    fail(rc, "cannot copy");
  }
  // The source's group where this user may give it (its own groups; root
  // any), then its mode: a copy is never readable by more users than the
  // original, whatever the umask.
  if (fchown(copy, static_cast<uid_t>(-1), source.st_gid) != 0 && errno != EPERM)
    give_up(errno, "cannot set the copy's group");
  if (fchmod(copy, source.st_mode & 0777) != 0) give_up(errno, "cannot set the copy's mode");
  if (!file.commit(true)) give_up(errno, "cannot write the copy");
}

std::string lmdb_library_version() {
  int major = 0, minor = 0, patch = 0;
  mdb_version(&major, &minor, &patch);
  return fmt::format("{}.{}.{}", major, minor, patch);
}

}  // namespace q::store
