#include "libq/lmdb/store.hpp"
#include "libq/lmdb/env_detail.hpp"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "libq/files.hpp"
#include "libq/lmdb/records.hpp"

namespace q::store {

namespace {

// Larger than any disk this is likely to sit on: without MDB_WRITEMAP the file
// only grows as used, and a fixed size avoids resizing a map that other
// processes have open.
constexpr std::size_t kMapSize = std::size_t{1} << 40;  // 1 TiB
constexpr unsigned kMaxReaders = 1022;
constexpr unsigned kMaxDatabases = 24;

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

// A new file on a read-only mount: said before anything is tried there (an
// unlink of FILE.creating, a mkdir), whose errors would name something else.
void refuse_read_only_directory(const std::string& path) {
  std::string dir = parent_dir(path);
  struct stat st {};
  while (stat(dir.c_str(), &st) != 0 && dir != parent_dir(dir)) dir = parent_dir(dir);
  if (on_read_only_mount(dir))
    throw Error(ErrorKind::ReadOnly,
                fmt::format("{}: cannot create queue file: {} is on a read-only file system "
                            "(mounted read-only)",
                            path, dir));
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
// LMDB opens the data file and FILE-lock by name, following symbolic links,
// and writes FILE-lock's header when it is the only user. Checking the names
// first and letting LMDB open them after leaves a window in which a link can
// be swapped in. So LMDB is given names that cannot be swapped:
//  - where no other user can change the file's directory (it belongs to this
//    user or root, no group or other may write it, and it is not on FUSE,
//    whose daemon may answer each lookup differently), the directory itself
//    is pinned: LMDB gets /proc/self/fd/D/NAME, D a descriptor of the
//    directory q checked, and NAME and NAME-lock were just seen there as the
//    very files q opened (not links). That costs an open, an fstatfs and two
//    lstats, where the private directory below costs a mkdir, links, unlinks
//    and an rmdir on every open (a third of a one-shot send);
//  - elsewhere (a shared or sticky directory), a private directory (mode 0700,
//    made by mkdtemp) holding links to /proc/self/fd/N of the descriptors q
//    opened and checked itself; opening such a link opens that very file.
// Where neither can be had (no /proc, no writable temporary directory), LMDB
// gets the real names and verify_lmdb_files() checks afterwards which files
// it opened.
class PinnedNames {
 public:
  PinnedNames(const std::string& file, int data_fd, int lock_fd) {
    if (pin_directory(file, data_fd, lock_fd)) return;
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
  ~PinnedNames() {
    remove();
    if (dir_fd_ >= 0) ::close(dir_fd_);
  }
  PinnedNames(const PinnedNames&) = delete;
  PinnedNames& operator=(const PinnedNames&) = delete;

  // The name to give LMDB; empty when pinning is not available.
  const std::string& data() const { return data_; }

 private:
  // True when `name` (through the pinned directory) is `fd`'s file itself,
  // not a link to it: lstat follows /proc's link to the directory and stops
  // at NAME. A /proc of another PID namespace fails this too.
  static bool names_file(const std::string& name, int fd) {
    struct stat named {
    }, ours{};
    return lstat(name.c_str(), &named) == 0 && S_ISREG(named.st_mode) && fstat(fd, &ours) == 0 &&
           same_file(named, ours);
  }
  bool pin_directory(const std::string& file, int data_fd, int lock_fd) {
    const std::string dir = parent_dir(file);
    const std::string base = files::base_name(file);
    if (base.empty()) return false;
    const int dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return false;
    // A FUSE daemon answers each lookup as it likes (owner, mode, and a link
    // where it showed a file a moment ago): only a kernel file system's
    // answers are trusted here.
    struct statfs fs {};
    constexpr unsigned long kFuseMagic = 0x65735546;
    if (fstatfs(dir_fd, &fs) != 0 || static_cast<unsigned long>(fs.f_type) == kFuseMagic) {
      ::close(dir_fd);
      return false;
    }
    struct stat st {};
    const bool safe = fstat(dir_fd, &st) == 0 && S_ISDIR(st.st_mode) &&
                      (st.st_uid == geteuid() || st.st_uid == 0) &&
                      (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
    const std::string data = fmt::format("/proc/self/fd/{}/{}", dir_fd, base);
    if (!safe || !names_file(data, data_fd) ||
        (lock_fd >= 0 && !names_file(data + "-lock", lock_fd))) {
      ::close(dir_fd);
      return false;
    }
    dir_fd_ = dir_fd;
    data_ = data;
    return true;
  }
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
  int dir_fd_ = -1;
  std::string dir_, data_;
  std::vector<std::string> links_;
};
// The first page of an LMDB file carries its magic number (in the meta
// page after the 16-byte page header).
bool starts_as_lmdb(int fd) {
  unsigned char head[24] = {};
  ssize_t got = pread(fd, head, sizeof head, 0);
  std::uint32_t magic = 0;
  if (got == static_cast<ssize_t>(sizeof head)) std::memcpy(&magic, head + 16, 4);
  return magic == kLmdbMagic;
}

}  // namespace

// ---- Env: opening -----------------------------------------------------------

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
    refuse_read_only_directory(path);
    make_dirs(parent_dir(path));
    refuse_network_filesystem(path);
    if (env->stage()) return env;
    // Another process created the file while this one waited: open theirs.
  } else if (S_ISDIR(st.st_mode)) {
    throw Error(ErrorKind::Io, fmt::format("{}: is a directory, not a queue file", path));
  } else {
    refuse_network_filesystem(path);
    if (!options.read_only && on_read_only_mount(path)) throw read_only_mount(path);
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
  auto denied = [&](const std::string& file, const char* what, const char* permission) {
    struct stat st {};
    return Error(ErrorKind::Permission,
                 fmt::format("{}: cannot open {}: permission denied: no {} permission for this "
                             "user ({}{}); {}",
                             file, what, permission, who,
                             stat(file.c_str(), &st) == 0 ? "; the file has " + describe_owner(st)
                                                          : std::string(),
                             needs));
  };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == ENOENT)
      throw Error(ErrorKind::NotFound, fmt::format("{}: no such queue file", path));
    if (errno == EACCES || errno == EPERM) throw denied(path, "queue file", "read");
    fail_errno(errno, path, "cannot open queue file");
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail_errno(errno, path, "cannot stat queue file");
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::Io, fmt::format("{}: not a regular file", path));
  if (!starts_as_lmdb(fd_)) throw Error(ErrorKind::Io, fmt::format("{}: not a q queue file", path));
  lock_fd_ = files::open_companion(lock, true, false);
  if (lock_fd_ < 0 && (errno == EROFS || (errno == ENOENT && on_read_only_mount(path)))) {
    attach_without_lock_file();
    return;
  }
  if (lock_fd_ < 0) {
    if (errno == ENOENT)
      throw Error(
          ErrorKind::Permission,
          fmt::format(
              "{}: cannot open lock file: permission denied: it does not exist, and this user may "
              "not write the queue file to make it ({}); any command of a user "
              "who may write it makes it; {}",
              lock, who, needs));
    if (errno == EACCES || errno == EPERM) throw denied(lock, "lock file", "write");
    fail_errno(errno, lock, "cannot open lock file");
  }
  open_lmdb(path, lock_fd_, MDB_RDONLY);
  refuse_truncated();
  int dead = 0;
  mdb_reader_check(env_, &dead);
  next_reader_check_ = std::chrono::steady_clock::now() + kReaderCheckEvery;
  init_databases(false);
}

// A file on a read-only mount: FILE-lock cannot be written there (nor made),
// so LMDB runs without it (MDB_NOLOCK), and this reader has no slot in the
// reader table that writers consult before they reuse a page. A writer may
// still reach the file through another, writable mount of it (a read-only bind
// mount into a container); so every read transaction of this process holds a
// shared flock on the file (Txn), which q's writers' exclusive one excludes:
// no q writer commits, and so no page of this reader's snapshot is reused,
// while it reads. Between its transactions writers go on as before.
void Env::attach_without_lock_file() {
  no_lock_ = true;
  open_lmdb(options_.path, -1, MDB_RDONLY | MDB_NOLOCK);
  lock_snapshot();
  try {
    refuse_truncated();
  } catch (...) {
    unlock_snapshot();
    throw;
  }
  unlock_snapshot();
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
    if (!starts_as_lmdb(fd_))
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
    PinnedNames pinned(file, fd_, lock_fd);
    rc = mdb_env_open(env_, pinned.data().empty() ? file.c_str() : pinned.data().c_str(), flags,
                      0666);
  }
  if (rc != 0) fail(rc, "cannot open queue file");
  verify_lmdb_files(lock_fd);
}
std::vector<Env::NamedDb> Env::named_databases() {
  return {
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
}

Error Env::not_ours() const {
  return Error(ErrorKind::Io, fmt::format("{}: not a q queue file (an LMDB file without "
                                          "q's databases)",
                                          options_.path));
}

// A new (or empty) file: every database and the meta keys, in one commit.
void Env::create_databases(const std::vector<NamedDb>& all) {
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

void Env::init_databases(bool may_initialize) {
  const auto all = named_databases();
  if (may_initialize) create_databases(all);

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

}  // namespace q::store
