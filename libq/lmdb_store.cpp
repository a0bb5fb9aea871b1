#include "lmdb_store.hpp"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "files.hpp"
#include "lmdb_upgrade.hpp"
#include "records.hpp"

namespace q::store {

LmdbActivity g_lmdb_activity;

namespace {

NoticeHandler g_notice = nullptr;

// Marks the extent of one LMDB call that walks pages (see LmdbActivity).
class InLmdb {
 public:
  InLmdb() {
    g_lmdb_activity.calls = g_lmdb_activity.calls + 1;
    g_lmdb_activity.inside = 1;
  }
  ~InLmdb() { g_lmdb_activity.inside = 0; }
  InLmdb(const InLmdb&) = delete;
  InLmdb& operator=(const InLmdb&) = delete;
};

// Larger than any disk this is likely to sit on: without MDB_WRITEMAP the file
// only grows as used, and a fixed size avoids resizing a map that other
// processes have open.
constexpr std::size_t kMapSize = std::size_t{1} << 40;  // 1 TiB
constexpr unsigned kMaxReaders = 1022;
constexpr unsigned kMaxDatabases = 24;
constexpr std::uint32_t kLmdbMagic = 0xBEEFC0DE;
// Offsets in an LMDB 0.9 meta page (64-bit): a 16-byte page header, then
// mm_magic, mm_version, mm_address, mm_mapsize, mm_dbs[2] (free, main; 48
// bytes each, md_root last), mm_last_pg, mm_txnid.
constexpr std::size_t kMetaMagic = 16;
constexpr std::size_t kMetaDbs = 40;
constexpr std::size_t kDbRecordSize = 48;
constexpr std::size_t kDbRootOffset = 40;
constexpr std::size_t kMetaLastPage = kMetaDbs + 2 * kDbRecordSize;
constexpr std::size_t kMetaTxnId = kMetaLastPage + 8;
constexpr std::size_t kMetaEnd = kMetaTxnId + 8;
constexpr MDB_dbi kFreeDbi = 0;
constexpr MDB_dbi kMainDbi = 1;

// A read-only transaction for looking at LMDB's own databases at open.
class ReadOnlyTxn {
 public:
  explicit ReadOnlyTxn(MDB_env* env) {
    if (mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn_) != 0) txn_ = nullptr;
  }
  ~ReadOnlyTxn() {
    if (txn_) mdb_txn_abort(txn_);
  }
  ReadOnlyTxn(const ReadOnlyTxn&) = delete;
  ReadOnlyTxn& operator=(const ReadOnlyTxn&) = delete;
  explicit operator bool() const { return txn_ != nullptr; }

  void each(MDB_dbi dbi, const std::function<void(const MDB_val&, const MDB_val&)>& f) {
    MDB_cursor* opened = nullptr;
    if (mdb_cursor_open(txn_, dbi, &opened) != 0) return;
    std::unique_ptr<MDB_cursor, void (*)(MDB_cursor*)> cursor(opened, mdb_cursor_close);
    MDB_val key{}, value{};
    for (int rc = mdb_cursor_get(opened, &key, &value, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(opened, &key, &value, MDB_NEXT))
      f(key, value);
  }

 private:
  MDB_txn* txn_ = nullptr;
};
static_assert(sizeof(void*) == 8 && sizeof(std::size_t) == 8,
              "the meta offsets are those of 64-bit hosts");

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail_errno(int err, const std::string& path, const std::string& doing) {
  ErrorKind kind = ErrorKind::Io;
  if (err == EACCES || err == EPERM || err == EROFS) kind = ErrorKind::Permission;
  if (err == ENOENT) kind = ErrorKind::NotFound;
  throw Error(kind, fmt::format("{}: {}: {}", path, doing, errno_text(err)));
}

using files::parent_dir;

void make_dirs(const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "/") return;
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error(ErrorKind::Io, fmt::format("{}: not a directory", dir));
    return;
  }
  make_dirs(parent_dir(dir));
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    fail_errno(errno, dir, "cannot create directory");
}

// LMDB's locking needs a local filesystem: its lock file is shared memory, and
// POSIX locks and mmap coherence over NFS or SMB do not hold.
void refuse_network_filesystem(const std::string& path) {
  struct statfs fs {};
  if (statfs(parent_dir(path).c_str(), &fs) != 0) return;
  const char* name = nullptr;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0x6969: name = "NFS"; break;
    case 0x517B: name = "SMB"; break;
    case 0xFF534D42: name = "CIFS"; break;
    case 0xFE534D42: name = "SMB2"; break;
    case 0x01021997: name = "9p"; break;
    case 0x00C36400: name = "Ceph"; break;
    case 0x5346414F: name = "AFS"; break;
    case 0x0BD00BD0: name = "Lustre"; break;
    case 0x47504653: name = "GPFS"; break;
    default: break;
  }
  if (name)
    throw Error(ErrorKind::Io,
                fmt::format("{}: is on a network filesystem ({}); LMDB's locking needs a "
                            "local disk, so q refuses it",
                            path, name));
}

void refuse_broken_lmdb() {
  int major = 0, minor = 0, patch = 0;
  mdb_version(&major, &minor, &patch);
  if (major == 0 && minor == 9 && patch >= 26 && patch <= 31)
    throw Error(ErrorKind::Io,
                fmt::format("liblmdb {}.{}.{} has a shared-mutex bug (ITS#9278) that breaks "
                            "files shared by processes; use 0.9.25 or older, or 0.9.32 or newer",
                            major, minor, patch));
}

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

std::string describe_owner(const struct stat& st) {
  return fmt::format("mode {:04o}, owner uid {} gid {}", st.st_mode & 07777, st.st_uid, st.st_gid);
}

// EACCES on a queue file: say which of the file, its lock file and its
// directory lacks which permission for this user, and how to share it.
[[noreturn]] void fail_access(const std::string& path, const std::string& doing) {
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

MDB_val as_val(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// LMDB opens the data file and FILE-lock by name, following symbolic links,
// and writes FILE-lock's header when it is the only user. Checking the names
// first and letting LMDB open them after leaves a window in which a link can
// be swapped in. So LMDB is given names that cannot be swapped: a private
// directory (mode 0700, made by mkdtemp) holding links to /proc/self/fd/N of
// the descriptors q opened and checked itself; opening such a link opens that
// very file. Where that cannot be had (no /proc, no writable temporary
// directory), LMDB gets the real names and verify_lmdb_files() checks
// afterwards which files it opened.
class PinnedNames {
 public:
  PinnedNames(int data_fd, int lock_fd) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && tmp[0] == '/' ? tmp : "/tmp") + "/q-open.XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data())) return;
    dir_ = buffer.data();
    const std::string data = dir_ + "/q";
    if (!link_to(data_fd, data) || (lock_fd >= 0 && !link_to(lock_fd, data + "-lock"))) {
      remove();
      return;
    }
    // /proc may be missing, or another process's (a foreign mount).
    struct stat named {
    }, ours{};
    if (stat(data.c_str(), &named) != 0 || fstat(data_fd, &ours) != 0 || !same_file(named, ours)) {
      remove();
      return;
    }
    data_ = data;
  }
  ~PinnedNames() { remove(); }
  PinnedNames(const PinnedNames&) = delete;
  PinnedNames& operator=(const PinnedNames&) = delete;

  // The name to give LMDB; empty when pinning is not available.
  const std::string& data() const { return data_; }

 private:
  bool link_to(int fd, const std::string& name) {
    if (symlink(fmt::format("/proc/self/fd/{}", fd).c_str(), name.c_str()) != 0) return false;
    links_.push_back(name);
    return true;
  }
  void remove() {
    for (const auto& name : links_) ::unlink(name.c_str());
    links_.clear();
    if (!dir_.empty()) ::rmdir(dir_.c_str());
    dir_.clear();
  }
  std::string dir_, data_;
  std::vector<std::string> links_;
};

// The start of LMDB 0.9's MDB_env: its descriptors of the data file, the lock
// file and the data file again (for synced meta writes). mdb_env_get_fd()
// gives only the first; it is also how this layout is checked before use.
struct LmdbEnvHead {
  int data_fd, lock_fd, meta_fd;
};

}  // namespace

void set_notice_handler(NoticeHandler handler) { g_notice = handler; }

// ---- Env --------------------------------------------------------------------

std::unique_ptr<Env> Env::open(const OpenOptions& options) {
  refuse_broken_lmdb();
  const std::string& path = options.path;
  std::unique_ptr<Env> env(new Env(options));

  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == EACCES) fail_access(path, "cannot open queue file");
    if (errno != ENOENT) fail_errno(errno, path, "cannot open queue file");
    if (!options.create)
      throw Error(ErrorKind::NotFound, fmt::format("{}: no such queue file", path))
          .with_remedy(Remedy::CreateFile);
    make_dirs(parent_dir(path));
    refuse_network_filesystem(path);
    if (env->stage()) return env;
    // Another process created the file while this one waited: open theirs.
  } else if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorKind::Io, fmt::format("{}: is a directory, not a queue file", path));
  } else {
    refuse_network_filesystem(path);
  }
  env->attach();
  return env;
}

// A new file is built under a temporary name and renamed into place by the
// first commit that puts something in it (Txn::commit -> publish), so a crash
// at any point leaves either no file or the finished one, never a file without
// its databases or queue. Creators in one directory take turns (an flock on
// the directory); the loser of a race then opens the winner's file.
bool Env::stage() {
  const std::string& path = options_.path;
  const std::string dir = parent_dir(path);
  dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) fail_errno(errno, dir, "cannot open directory");
  lock_bounded(dir_fd_, dir);
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    ::close(dir_fd_);
    dir_fd_ = -1;
    return false;
  }
  staging_ = path + ".creating";
  remove_stale_staging(dir);
  // O_EXCL: never through a link; the name is free now.
  fd_ = ::open(staging_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    const std::string staging = staging_;
    staging_.clear();
    if (err == EEXIST)  // made meanwhile by a process that ignores the directory lock
      throw Error(ErrorKind::Io, fmt::format("{}: cannot create queue file: {} appeared "
                                             "meanwhile (another program?)",
                                             path, staging));
    if (err == EACCES || err == EPERM) fail_access(path, "cannot create queue file");
    fail_errno(err, path, "cannot create queue file");
  }
  // Nobody else can see the file yet: no lock file (MDB_NOLOCK), and no sync
  // for the databases' commit, which the first real commit's sync covers.
  open_lmdb(staging_, -1, MDB_NOLOCK | MDB_NOSYNC);
  init_databases(true);
  if (options_.durable) mdb_env_set_flags(env_, MDB_NOSYNC, 0);
  publish_on_commit_ = true;
  return true;
}

// FILE.creating exists only while its creator holds the directory lock, which
// this process holds now: one found here was left by a creator that died.
// Remove it (unlink removes a link, never what it points to); when this user
// may not (a sticky directory and another user's leftover), say so, naming it.
void Env::remove_stale_staging(const std::string& dir) {
  if (::unlink(staging_.c_str()) == 0 || errno == ENOENT) return;
  const int err = errno;
  struct stat st {};
  const std::string left = lstat(staging_.c_str(), &st) == 0
                               ? fmt::format(" (owner uid {} gid {})", st.st_uid, st.st_gid)
                               : std::string();
  const std::string staging = staging_;
  staging_.clear();
  throw Error(err == EACCES || err == EPERM ? ErrorKind::Permission : ErrorKind::Io,
              fmt::format("{}: cannot create queue file: {} is left over from a create that did "
                          "not finish{}, and this user cannot remove it ({}{}): ask its owner "
                          "or root to remove it",
                          options_.path, staging, left, std::strerror(err),
                          err == EPERM ? fmt::format("; {} is a sticky directory", dir) : ""));
}

void Env::publish() {
  publish_on_commit_ = false;
  const std::string& path = options_.path;
  int rc = renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && errno == EINVAL) {  // a filesystem without RENAME_NOREPLACE
    rc = ::link(staging_.c_str(), path.c_str());
    if (rc == 0) ::unlink(staging_.c_str());
  }
  if (rc != 0) {
    if (errno == EEXIST)
      throw Error(ErrorKind::Io,
                  fmt::format("{}: cannot create queue file: another program created a file of "
                              "that name meanwhile; nothing was written",
                              path));
    fail_errno(errno, path, "cannot create queue file");
  }
  staging_.clear();
  // The new name must be as durable as the commit it carries.
  fsync(dir_fd_);
  ::close(dir_fd_);
  dir_fd_ = -1;
  // The environment was opened without a lock file; from now on other
  // processes may use the file, so it is opened again as they open it. Now,
  // so that the lock file and the doorbell get the creator's umask; should
  // that fail, the next transaction tries again and reports it (the commit
  // itself is done and published).
  reopen_ = true;
  try {
    reopen_if_published();
    announce_commit();
  } catch (const Error&) {
    reopen_ = true;
  }
}

void Env::reopen_if_published() {
  if (!reopen_) return;
  reopen_ = false;
  bell_.reset();
  if (env_) mdb_env_close(env_);
  env_ = nullptr;
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  attach();
}

// Read-only: see OpenOptions::read_only.
void Env::attach_read_only() {
  const std::string& path = options_.path;
  const std::string lock = path + "-lock";
  const std::string who = fmt::format("uid {} gid {}", geteuid(), getegid());
  const std::string needs = fmt::format(
      "to read, q needs read permission on {} and read and write permission on {} (LMDB's "
      "reader table, where each reader writes its slot)",
      path, lock);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == ENOENT)
      throw Error(ErrorKind::NotFound, fmt::format("{}: no such queue file", path));
    if (errno == EACCES || errno == EPERM) {
      struct stat st {};
      throw Error(ErrorKind::Permission,
                  fmt::format("{}: cannot open queue file: permission denied: no read "
                              "permission for this user ({}{}); {}",
                              path, who,
                              stat(path.c_str(), &st) == 0 ? "; the file has " + describe_owner(st)
                                                           : std::string(),
                              needs));
    }
    fail_errno(errno, path, "cannot open queue file");
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail_errno(errno, path, "cannot stat queue file");
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::Io, fmt::format("{}: not a regular file", path));
  unsigned char head[24] = {};
  ssize_t got = pread(fd_, head, sizeof head, 0);
  std::uint32_t magic = 0;
  if (got == static_cast<ssize_t>(sizeof head)) std::memcpy(&magic, head + 16, 4);
  if (magic != kLmdbMagic) throw Error(ErrorKind::Io, fmt::format("{}: not a q queue file", path));
  lock_fd_ = files::open_companion(lock, true, false);
  if (lock_fd_ < 0) {
    if (errno == ENOENT)
      throw Error(
          ErrorKind::Permission,
          fmt::format(
              "{}: cannot open lock file: permission denied: it does not exist, and this user may "
              "not write the queue file to make it ({}); any command of a user "
              "who may write it makes it; {}",
              lock, who, needs));
    if (errno == EACCES || errno == EPERM) {
      struct stat lst {};
      throw Error(
          ErrorKind::Permission,
          fmt::format("{}: cannot open lock file: permission denied: no write "
                      "permission for this user ({}{}); {}",
                      lock, who,
                      stat(lock.c_str(), &lst) == 0 ? "; the file has " + describe_owner(lst)
                                                    : std::string(),
                      needs));
    }
    fail_errno(errno, lock, "cannot open lock file");
  }
  open_lmdb(path, lock_fd_, MDB_RDONLY);
  refuse_truncated();
  int dead = 0;
  mdb_reader_check(env_, &dead);
  next_reader_check_ = std::chrono::steady_clock::now() + kReaderCheckEvery;
  init_databases(false);
}

void Env::attach() {
  if (options_.read_only) return attach_read_only();
  const std::string& path = options_.path;
  // 0666 & ~umask, for the data file and (through LMDB) its lock file, so a
  // group can share a queue.
  fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == EACCES || errno == EPERM) fail_access(path, "cannot open queue file");
    if (errno == ENOENT)
      throw Error(ErrorKind::NotFound, fmt::format("{}: no such queue file", path));
    fail_errno(errno, path, "cannot open queue file");
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail_errno(errno, path, "cannot stat queue file");
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::Io, fmt::format("{}: not a regular file", path));

  // An empty file is what a crash of an older q during its first create left.
  bool fresh = st.st_size == 0;
  if (fresh && !options_.create)
    throw Error(ErrorKind::Io, fmt::format("{}: not a q queue file (it is empty)", path));
  if (!fresh) {
    // Look at LMDB's meta page ourselves first: LMDB would create a lock file
    // next to any file it is pointed at.
    unsigned char head[24] = {};
    ssize_t got = pread(fd_, head, sizeof head, 0);
    std::uint32_t magic = 0;
    if (got == static_cast<ssize_t>(sizeof head)) std::memcpy(&magic, head + 16, 4);
    if (magic != kLmdbMagic)
      throw Error(ErrorKind::Io, fmt::format("{}: not a q queue file", path));
  }
  // FILE-lock and FILE-wake: never through a link (see files.hpp).
  const std::string lock = path + "-lock";
  lock_fd_ = files::open_companion(lock, true, true);
  if (lock_fd_ < 0) {
    if (errno == EACCES || errno == EPERM) fail_access(path, "cannot open queue file");
    fail_errno(errno, lock, "cannot open lock file");
  }
  bell_ = Bell::open(path, fd_);
  open_lmdb(path, lock_fd_, 0);
  if (!fresh) refuse_truncated();

  // Readers killed mid-transaction keep their slot (and pin old pages) until
  // someone clears them.
  int dead = 0;
  mdb_reader_check(env_, &dead);
  next_reader_check_ = std::chrono::steady_clock::now() + kReaderCheckEvery;
  MDB_envinfo info{};
  mdb_env_info(env_, &info);
  last_pgno_seen_ = info.me_last_pgno;

  init_databases(fresh);
}

void Env::open_lmdb(const std::string& file, int lock_fd, unsigned extra_flags) {
  int rc = mdb_env_create(&env_);
  if (rc != 0) fail(rc, "cannot create LMDB environment");
  mdb_env_set_mapsize(env_, kMapSize);
  mdb_env_set_maxreaders(env_, kMaxReaders);
  mdb_env_set_maxdbs(env_, kMaxDatabases);
  unsigned flags = MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD | extra_flags;
  if (!options_.durable) flags |= MDB_NOSYNC;
  {
    PinnedNames pinned(fd_, lock_fd);
    rc = mdb_env_open(env_, pinned.data().empty() ? file.c_str() : pinned.data().c_str(), flags,
                      0666);
  }
  if (rc != 0) fail(rc, "cannot open queue file");
  verify_lmdb_files(lock_fd);
}

// LMDB must have opened the very files q checked: with pinned names it has;
// this is what tells when it got the real names (and a link swapped in).
void Env::verify_lmdb_files(int lock_fd) {
  int lmdb_fd = -1;
  if (mdb_env_get_fd(env_, &lmdb_fd) != 0) return;
  const auto* head = reinterpret_cast<const LmdbEnvHead*>(env_);
  if (head->data_fd != lmdb_fd) return;  // not the layout this was written for
  struct stat ours {
  }, theirs{};
  auto differs = [&](int mine, int lmdbs) {
    return lmdbs >= 0 && fstat(mine, &ours) == 0 && fstat(lmdbs, &theirs) == 0 &&
           !same_file(ours, theirs);
  };
  std::string which;
  if (differs(fd_, head->data_fd) || differs(fd_, head->meta_fd))
    which = options_.path;
  else if (lock_fd >= 0 && differs(lock_fd, head->lock_fd))
    which = options_.path + "-lock";
  if (which.empty()) return;
  throw Error(ErrorKind::Io,
              fmt::format("{}: was replaced while q opened it (a symbolic link swapped in?); "
                          "LMDB opened another file than the one q checked: look at what {} is now",
                          which, which));
}

// A file cut short must be refused before LMDB reads past its end (SIGBUS).
// The meta page's last page number alone is no measure of that: it counts
// pages allocated and freed inside one transaction and never written, so a
// healthy file may end pages short of it (after any large purge or drain).
// Those pages are on the free list (LMDB keeps every page below the last
// either in use or free). So a file is refused when a root the newest meta
// page or the main database names lies past its end, or when a page past its
// end is not free. A cut met deeper in a tree while reading the free list is
// a read past the end, which the CLI reports as a damaged file (cli/crash.cpp).
void Env::refuse_truncated() {
  MDB_stat env_stat{};
  mdb_env_stat(env_, &env_stat);
  const std::uint64_t page_size = env_stat.ms_psize;
  // The size is taken after the meta page and the snapshot are read: another
  // process may commit meanwhile, and a commit writes its pages (growing the
  // file) before its meta, so a size read first could be older than the meta.
  const MetaRoots meta = newest_meta(page_size);
  ReadOnlyTxn txn(env_);
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail_errno(errno, options_.path, "cannot stat queue file");
  const std::uint64_t pages_in_file = static_cast<std::uint64_t>(st.st_size) / page_size;
  auto refuse = [&](std::uint64_t page, const std::string& what) {
    throw Error(ErrorKind::Io,
                fmt::format("{}: the file is damaged: it is {} bytes, but {} is page {}, "
                            "ending at byte {} (truncated?); restore it from a backup",
                            options_.path, st.st_size, what, page, (page + 1) * page_size));
  };
  constexpr std::uint64_t kNoPage = ~std::uint64_t{0};
  auto check_root = [&](std::uint64_t root, const std::string& what) {
    if (root != kNoPage && root >= pages_in_file) refuse(root, what);
  };

  if (meta.last_page == kNoPage) refuse(1, "a meta page");
  if (meta.last_page < pages_in_file) return;  // the common case: nothing to look at
  check_root(meta.free_root, "the free list's root");
  check_root(meta.main_root, "the main database's root");

  if (!txn) return;
  InLmdb in_lmdb;
  // Named databases: the main database's values are their records (MDB_db).
  txn.each(kMainDbi, [&](const MDB_val& key, const MDB_val& value) {
    if (value.mv_size != kDbRecordSize) return;
    std::uint64_t root = 0;
    std::memcpy(&root, static_cast<const char*>(value.mv_data) + kDbRootOffset, 8);
    check_root(root, fmt::format("the root of database {}",
                                 std::string(static_cast<const char*>(key.mv_data), key.mv_size)));
  });
  // The free list: values are page-number lists (a count, then the pages).
  std::vector<bool> free_past_end(meta.last_page + 1 - pages_in_file, false);
  txn.each(kFreeDbi, [&](const MDB_val&, const MDB_val& value) {
    const auto* ids = static_cast<const unsigned char*>(value.mv_data);
    const std::size_t words = value.mv_size / 8;
    std::uint64_t count = 0;
    if (words > 0) std::memcpy(&count, ids, 8);
    for (std::size_t i = 1; i <= count && i < words; ++i) {
      std::uint64_t page = 0;
      std::memcpy(&page, ids + 8 * i, 8);
      if (page >= pages_in_file && page <= meta.last_page)
        free_past_end[page - pages_in_file] = true;
    }
  });
  for (std::size_t i = 0; i < free_past_end.size(); ++i)
    if (!free_past_end[i]) refuse(pages_in_file + i, "a page in use");
}

// LMDB's two meta pages (page header, then MDB_meta): the one with the higher
// transaction id is the one readers use. Layout of LMDB 0.9 on 64-bit hosts.
Env::MetaRoots Env::newest_meta(std::uint64_t page_size) const {
  MetaRoots newest{};
  newest.last_page = ~std::uint64_t{0};
  std::uint64_t newest_txn = 0;
  for (std::uint64_t page = 0; page < 2; ++page) {
    unsigned char meta[kMetaEnd] = {};
    if (pread(fd_, meta, sizeof meta, static_cast<off_t>(page * page_size)) !=
        static_cast<ssize_t>(sizeof meta))
      continue;
    std::uint32_t magic = 0;
    std::memcpy(&magic, meta + kMetaMagic, 4);
    if (magic != kLmdbMagic) continue;
    std::uint64_t txn = 0;
    std::memcpy(&txn, meta + kMetaTxnId, 8);
    if (newest.last_page != ~std::uint64_t{0} && txn <= newest_txn) continue;
    newest_txn = txn;
    std::memcpy(&newest.free_root, meta + kMetaDbs + kDbRootOffset, 8);
    std::memcpy(&newest.main_root, meta + kMetaDbs + kDbRecordSize + kDbRootOffset, 8);
    std::memcpy(&newest.last_page, meta + kMetaLastPage, 8);
  }
  return newest;
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

void Env::init_databases(bool may_initialize) {
  struct Named {
    MDB_dbi* dbi;
    const char* name;
  };
  const Named all[] = {
      {&db_.meta, "meta"},         {&db_.queues, "queues"},
      {&db_.messages, "messages"}, {&db_.bodies, "bodies"},
      {&db_.ready, "ready"},       {&db_.delayed, "delayed"},
      {&db_.leases, "leases"},     {&db_.age, "age"},
      {&db_.dead, "dead"},         {&db_.dead_expiry, "dead-expiry"},
      {&db_.dedup, "dedup"},       {&db_.dedup_expiry, "dedup-expiry"},
      {&db_.done, "done"},         {&db_.done_expiry, "done-expiry"},
      {&db_.groups, "groups"},     {&db_.group_messages, "group-messages"},
      {&db_.heads, "heads"},       {&db_.attempts, "attempts"},
      {&db_.workers, "workers"},   {&db_.pauses, "pauses"},
  };
  auto not_ours = [&] {
    return Error(ErrorKind::Io, fmt::format("{}: not a q queue file (an LMDB file without "
                                            "q's databases)",
                                            options_.path));
  };

  if (may_initialize) {
    Txn txn(*this, Txn::Write);
    MDB_dbi main;
    int rc = mdb_dbi_open(txn.handle(), nullptr, 0, &main);
    if (rc != 0) fail(rc, "cannot open main database");
    rc = mdb_dbi_open(txn.handle(), "meta", 0, &db_.meta);
    if (rc == MDB_NOTFOUND) {
      if (txn.entries(main) != 0) throw not_ours();
    } else if (rc != 0) {
      fail(rc, "cannot open database meta");
    }
    for (const auto& n : all) {
      rc = mdb_dbi_open(txn.handle(), n.name, MDB_CREATE, n.dbi);
      if (rc != 0) fail(rc, fmt::format("cannot create database {}", n.name));
    }
    rc = mdb_dbi_open(txn.handle(), "holders", MDB_CREATE, &holders_dbi_);
    if (rc != 0) fail(rc, "cannot create database holders");
    if (!txn.get(db_.meta, kFormatKey)) {
      txn.put(db_.meta, kFormatKey, encode_format(kFormatVersion));
      txn.put(db_.meta, kNextSeqKey, encode_meta_number(1));
      txn.put(db_.meta, kNextQidKey, encode_meta_number(1));
    }
    txn.commit();
  }

  // Databases added after a file was made (the attempt history, q work's
  // registry, pauses) are created by the first write transaction on it
  // (Txn::Txn), so reading an older file changes nothing; until then they
  // read as empty.
  auto added_later = [](const char* name) {
    return std::strcmp(name, "attempts") == 0 || std::strcmp(name, "workers") == 0 ||
           std::strcmp(name, "pauses") == 0;
  };

  Txn txn(*this, Txn::Read);
  for (const auto& n : all) {
    int rc;
    {
      InLmdb in_lmdb;
      rc = mdb_dbi_open(txn.handle(), n.name, 0, n.dbi);
    }
    if (rc == MDB_NOTFOUND && added_later(n.name)) {
      *n.dbi = kAbsentDbi;
      absent_.push_back({n.dbi, n.name});
      continue;
    }
    if (rc == MDB_NOTFOUND) throw not_ours();
    if (rc != 0) fail(rc, fmt::format("cannot open database {}", n.name));
  }
  {
    InLmdb in_lmdb;
    int rc = mdb_dbi_open(txn.handle(), "holders", 0, &holders_dbi_);
    holders_open_ = rc == 0;  // older files have none until a holder is named
  }
  auto format = txn.get(db_.meta, kFormatKey);
  auto version = format ? decode_format(*format) : std::nullopt;
  if (!version) throw not_ours();
  if (*version < kOldestFormat || *version > kFormatVersion)
    throw Error(ErrorKind::Io,
                fmt::format("{}: queue file format {} is not supported (this q reads format {})",
                            options_.path, *version, kFormatVersion));
  txn.commit();           // keeps the database handles open for later transactions
  note_format(*version);  // an older format is upgraded by the first write
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

void Env::lock_writer() { lock_bounded(fd_, options_.path); }

void Env::lock_bounded(int fd, const std::string& what) {
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return;
  if (errno != EWOULDBLOCK && errno != EINTR) fail_errno(errno, what, "cannot lock");
  // flock cannot time out, so poll with a short, growing pause. Contention ends
  // within a commit or two in normal operation; the bound is for a writer that
  // is stopped or hung.
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + std::chrono::milliseconds(options_.lock_timeout);
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    std::this_thread::sleep_for(pause);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return;
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

void Env::unlock_writer() { flock(fd_, LOCK_UN); }

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

void Env::fail(int rc, const std::string& doing) {
  const std::string& path = options_.path;
  switch (rc) {
    case EACCES:
    case EPERM: fail_access(path, doing);
    case EROFS:
      throw Error(ErrorKind::Permission,
                  fmt::format("{}: {}: the filesystem is read-only", path, doing));
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

// ---- Txn --------------------------------------------------------------------

Txn::Txn(Env& env, Mode mode) : env_(env), write_(mode == Write) {
  if (env_.damaged())
    throw Error(ErrorKind::Io,
                fmt::format("{}: the file is damaged (LMDB reported it earlier)", env_.path()));
  env_.reopen_if_published();
  env_.refuse_if_replaced();
  if (mode == Write && env_.read_only())
    throw Error(ErrorKind::Permission,
                fmt::format("{}: opened read-only (this user may not write it)", env_.path()));
  if (mode == Write) {
    env_.clear_dead_readers_now_and_then();
    env_.lock_writer();
    locked_ = true;
  }
  int rc = mdb_txn_begin(env_.handle(), nullptr, mode == Read ? MDB_RDONLY : 0, &txn_);
  if (rc != 0) {
    txn_ = nullptr;
    if (locked_) env_.unlock_writer();
    env_.fail(rc, "cannot begin transaction");
  }
  // The first write to an older file upgrades it, inside this transaction:
  // the upgrade and the write commit together or not at all.
  if (mode == Write && env_.format() != 0 && env_.format() < kFormatVersion) {
    try {
      if (format() < kFormatVersion) {
        upgrade_file(*this);
        format_ = kFormatVersion;
        upgraded_ = true;
      }
    } catch (...) {
      if (!env_.damaged()) mdb_txn_abort(txn_);
      txn_ = nullptr;
      env_.unlock_writer();
      locked_ = false;
      throw;
    }
  }
  if (mode == Write) env_.create_absent(txn_);
}

void Env::create_absent(MDB_txn* txn) {
  for (auto& a : absent_) {
    if (*a.dbi != kAbsentDbi) continue;
    int rc = mdb_dbi_open(txn, a.name, MDB_CREATE, a.dbi);
    if (rc != 0) {
      *a.dbi = kAbsentDbi;
      fail(rc, fmt::format("cannot create database {}", a.name));
    }
  }
}

// A handle opened in a transaction lives on only if that transaction commits.
void Env::settle_absent(bool committed) {
  if (committed) {
    absent_.clear();
    return;
  }
  for (auto& a : absent_) *a.dbi = kAbsentDbi;
}

std::uint32_t Txn::format() {
  if (format_ != 0) return format_;
  if (env_.format() == kFormatVersion) return format_ = kFormatVersion;
  auto bytes = get(env_.db().meta, kFormatKey);
  auto version = bytes ? decode_format(*bytes) : std::nullopt;
  format_ = version.value_or(kFormatVersion);
  if (format_ == kFormatVersion) env_.note_format(format_);  // committed by another process
  return format_;
}

Txn::~Txn() {
  if (txn_ && write_) env_.holders_aborted();
  if (txn_ && write_) env_.settle_absent(false);
  if (txn_ && !(write_ && env_.damaged())) mdb_txn_abort(txn_);
  if (locked_) env_.unlock_writer();
}

void Txn::commit() {
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_txn_commit(txn_);
  }
  txn_ = nullptr;
  if (write_) rc == 0 ? env_.holders_committed() : env_.holders_aborted();
  if (write_) env_.settle_absent(rc == 0);
  if (rc == 0 && upgraded_) env_.note_format(kFormatVersion);
  if (locked_) {
    if (rc == 0 && env_.publish_on_commit()) {
      env_.unlock_writer();
      locked_ = false;
      env_.publish();
      return;
    }
    if (rc == 0) env_.announce_commit();
    env_.unlock_writer();
    locked_ = false;
    if (rc == 0) env_.notice_bell_problem();  // printing must not hold the lock
  }
  if (rc != 0) env_.fail(rc, "cannot commit");
}

std::optional<std::string_view> Txn::get(MDB_dbi dbi, std::string_view key) {
  if (dbi == kAbsentDbi) return std::nullopt;
  MDB_val k = as_val(key), v{};
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_get(txn_, dbi, &k, &v);
  }
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != 0) env_.fail(rc, "cannot read");
  return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

void Txn::put(MDB_dbi dbi, std::string_view key, std::string_view value, unsigned flags) {
  MDB_val k = as_val(key), v = as_val(value);
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_put(txn_, dbi, &k, &v, flags);
  }
  if (rc != 0) env_.fail(rc, "cannot write");
}

bool Txn::del(MDB_dbi dbi, std::string_view key) {
  MDB_val k = as_val(key);
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_del(txn_, dbi, &k, nullptr);
  }
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) env_.fail(rc, "cannot delete");
  return true;
}

std::size_t Txn::entries(MDB_dbi dbi) {
  if (dbi == kAbsentDbi) return 0;
  MDB_stat st{};
  int rc = mdb_stat(txn_, dbi, &st);
  if (rc != 0) env_.fail(rc, "cannot stat database");
  return st.ms_entries;
}

// ---- Cursor -----------------------------------------------------------------

Cursor::Cursor(Txn& txn, MDB_dbi dbi) : txn_(txn) {
  if (dbi == kAbsentDbi) return;  // finds nothing
  int rc = mdb_cursor_open(txn.handle(), dbi, &cursor_);
  if (rc != 0) txn.env().fail(rc, "cannot open cursor");
}

Cursor::~Cursor() {
  if (cursor_) mdb_cursor_close(cursor_);
}

bool Cursor::move(MDB_cursor_op op) {
  if (!cursor_) return false;
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_cursor_get(cursor_, &key_, &value_, op);
  }
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) txn_.env().fail(rc, "cannot read");
  return true;
}

bool Cursor::seek(std::string_view key) {
  key_ = as_val(key);
  return move(MDB_SET_RANGE);
}
void Txn::release_read(std::string_view bytes) {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  if (write_ || bytes.size() < 2 * page) return;
  auto begin = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) & ~(page - 1);
  auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size()) & ~(page - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

bool Cursor::first() { return move(MDB_FIRST); }
bool Cursor::next() { return move(MDB_NEXT); }
bool Cursor::last() { return move(MDB_LAST); }

}  // namespace q::store
