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
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "records.hpp"

namespace q::store {

LmdbActivity g_lmdb_activity;

namespace {

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
static_assert(sizeof(void*) == 8 && sizeof(std::size_t) == 8, "the meta offsets are those of 64-bit hosts");

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail_errno(int err, const std::string& path, const std::string& doing) {
  ErrorKind kind = ErrorKind::Io;
  if (err == EACCES || err == EPERM || err == EROFS) kind = ErrorKind::Permission;
  if (err == ENOENT) kind = ErrorKind::NotFound;
  throw Error(kind, fmt::format("{}: {}: {}", path, doing, errno_text(err)));
}

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void make_dirs(const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "/") return;
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw Error(ErrorKind::Io, fmt::format("{}: not a directory", dir));
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
  return fmt::format("mode {:04o}, owner uid {} gid {}", st.st_mode & 07777, st.st_uid,
                     st.st_gid);
}

// EACCES on a queue file: say which of the file, its lock file and its
// directory lacks which permission for this user, and how to share it.
[[noreturn]] void fail_access(const std::string& path, const std::string& doing) {
  const std::string lock = path + "-lock";
  const std::string dir = parent_dir(path);
  const std::string who = fmt::format("uid {} gid {}", geteuid(), getegid());
  const std::string share = fmt::format(
      "q needs read and write permission on both {} and {}, even to read; to share a queue, "
      "give its group write permission (chmod g+w) or create it with umask 007",
      path, lock);
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

MDB_val as_val(std::string_view s) {
  return MDB_val{s.size(), const_cast<char*>(s.data())};
}

}  // namespace

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
      throw Error(ErrorKind::NotFound,
                  fmt::format("{}: no such queue file (make one with 'q create QUEUE')", path));
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
  ::unlink(staging_.c_str());  // left by a creator that crashed
  fd_ = ::open(staging_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    staging_.clear();
    if (errno == EACCES || errno == EPERM) fail_access(path, "cannot create queue file");
    fail_errno(errno, path, "cannot create queue file");
  }
  // Nobody else can see the file yet: no lock file (MDB_NOLOCK), and no sync
  // for the databases' commit, which the first real commit's sync covers.
  open_lmdb(staging_, MDB_NOLOCK | MDB_NOSYNC);
  init_databases(true);
  if (options_.durable) mdb_env_set_flags(env_, MDB_NOSYNC, 0);
  publish_on_commit_ = true;
  return true;
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
  if (env_) mdb_env_close(env_);
  env_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  attach();
}

void Env::attach() {
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
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::Io, fmt::format("{}: not a regular file", path));

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
  open_lmdb(path, 0);
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

void Env::open_lmdb(const std::string& file, unsigned extra_flags) {
  int rc = mdb_env_create(&env_);
  if (rc != 0) fail(rc, "cannot create LMDB environment");
  mdb_env_set_mapsize(env_, kMapSize);
  mdb_env_set_maxreaders(env_, kMaxReaders);
  mdb_env_set_maxdbs(env_, kMaxDatabases);
  unsigned flags = MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD | extra_flags;
  if (!options_.durable) flags |= MDB_NOSYNC;
  rc = mdb_env_open(env_, file.c_str(), flags, 0666);
  if (rc != 0) fail(rc, "cannot open queue file");
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
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail_errno(errno, options_.path, "cannot stat queue file");
  MDB_stat env_stat{};
  mdb_env_stat(env_, &env_stat);
  const std::uint64_t page_size = env_stat.ms_psize;
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

  const MetaRoots meta = newest_meta(page_size);
  if (meta.last_page == kNoPage) refuse(1, "a meta page");
  if (meta.last_page < pages_in_file) return;  // the common case: nothing to look at
  check_root(meta.free_root, "the free list's root");
  check_root(meta.main_root, "the main database's root");

  ReadOnlyTxn txn(env_);
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
      if (page >= pages_in_file && page <= meta.last_page) free_past_end[page - pages_in_file] = true;
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
  if (env_ && !damaged_) mdb_env_close(env_);
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
      {&db_.heads, "heads"},
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
    if (!txn.get(db_.meta, kFormatKey)) {
      std::uint32_t version = kFormatVersion;
      std::uint64_t one = 1;
      txn.put(db_.meta, kFormatKey, {reinterpret_cast<const char*>(&version), 4});
      txn.put(db_.meta, kNextSeqKey, {reinterpret_cast<const char*>(&one), 8});
      std::uint32_t qid = 1;
      txn.put(db_.meta, kNextQidKey, {reinterpret_cast<const char*>(&qid), 4});
    }
    txn.commit();
  }

  Txn txn(*this, Txn::Read);
  for (const auto& n : all) {
    int rc;
    {
      InLmdb in_lmdb;
      rc = mdb_dbi_open(txn.handle(), n.name, 0, n.dbi);
    }
    if (rc == MDB_NOTFOUND) throw not_ours();
    if (rc != 0) fail(rc, fmt::format("cannot open database {}", n.name));
  }
  auto format = txn.get(db_.meta, kFormatKey);
  if (!format || format->size() != 4) throw not_ours();
  std::uint32_t version = 0;
  std::memcpy(&version, format->data(), 4);
  if (version != kFormatVersion)
    throw Error(ErrorKind::Io,
                fmt::format("{}: queue file format {} is not supported (this q reads format {})",
                            options_.path, version, kFormatVersion));
  txn.commit();  // keeps the database handles open for later transactions
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
  futimens(fd_, nullptr);
}

Bell* Env::bell() {
  if (!bell_tried_) {
    bell_tried_ = true;
    bell_ = Bell::open(options_.path);
  }
  return bell_.get();
}

void Env::fail(int rc, const std::string& doing) {
  const std::string& path = options_.path;
  switch (rc) {
    case EACCES:
    case EPERM:
      fail_access(path, doing);
    case EROFS:
      throw Error(ErrorKind::Permission,
                  fmt::format("{}: {}: the filesystem is read-only", path, doing));
    case ENOSPC:
    case EDQUOT:
      throw Error(ErrorKind::Io, fmt::format("{}: {}: disk full", path, doing));
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
      throw Error(ErrorKind::Io, fmt::format("{}: {}: the file is corrupt ({})", path, doing,
                                             mdb_strerror(rc)));
    case MDB_VERSION_MISMATCH:
      throw Error(ErrorKind::Io,
                  fmt::format("{}: {}: made by an incompatible LMDB version", path, doing));
    case MDB_READERS_FULL:
      throw Error(ErrorKind::Busy,
                  fmt::format("{}: {}: too many processes have the file open", path, doing));
    case MDB_MAP_FULL:
      throw Error(ErrorKind::Io, fmt::format("{}: {}: the file reached its 1 TiB map size",
                                             path, doing));
    default:
      throw Error(ErrorKind::Io, fmt::format("{}: {}: {}", path, doing, mdb_strerror(rc)));
  }
}

void Env::copy_to(const std::string& target) {
  struct stat ours {}, theirs {};
  if (fstat(fd_, &ours) == 0 && stat(target.c_str(), &theirs) == 0 && ours.st_dev == theirs.st_dev &&
      ours.st_ino == theirs.st_ino)
    throw Error(ErrorKind::Usage, fmt::format("{}: is the queue file itself", target));
  std::string temporary = fmt::format("{}.tmp-{}", target, getpid());
  ::unlink(temporary.c_str());
  int rc = mdb_env_copy2(env_, temporary.c_str(), MDB_CP_COMPACT);
  if (rc != 0) {
    ::unlink(temporary.c_str());
    if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG || rc == EIO)
      throw Error(ErrorKind::Io, fmt::format("{}: cannot write the copy: {}", target,
                                             rc == EIO ? "I/O error or disk full" : "disk full"));
    if (rc == EACCES || rc == EPERM || rc == EROFS || rc == ENOENT || rc == ENOTDIR)
      fail_errno(rc, target, "cannot write the copy");
    fail(rc, "cannot copy");
  }
  int copy = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  bool synced = copy >= 0 && fsync(copy) == 0;
  int err = errno;
  if (copy >= 0) ::close(copy);
  if (!synced || ::rename(temporary.c_str(), target.c_str()) != 0) {
    if (synced) err = errno;
    ::unlink(temporary.c_str());
    fail_errno(err, target, "cannot write the copy");
  }
  int dir = ::open(parent_dir(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    ::close(dir);
  }
}

// ---- Txn --------------------------------------------------------------------

Txn::Txn(Env& env, Mode mode) : env_(env), write_(mode == Write) {
  if (env_.damaged())
    throw Error(ErrorKind::Io, fmt::format("{}: the file is damaged (LMDB reported it earlier)",
                                           env_.path()));
  env_.reopen_if_published();
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
}

Txn::~Txn() {
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
  }
  if (rc != 0) env_.fail(rc, "cannot commit");
}

std::optional<std::string_view> Txn::get(MDB_dbi dbi, std::string_view key) {
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
  MDB_stat st{};
  int rc = mdb_stat(txn_, dbi, &st);
  if (rc != 0) env_.fail(rc, "cannot stat database");
  return st.ms_entries;
}

// ---- Cursor -----------------------------------------------------------------

Cursor::Cursor(Txn& txn, MDB_dbi dbi) : txn_(txn) {
  int rc = mdb_cursor_open(txn.handle(), dbi, &cursor_);
  if (rc != 0) txn.env().fail(rc, "cannot open cursor");
}

Cursor::~Cursor() {
  if (cursor_) mdb_cursor_close(cursor_);
}

bool Cursor::move(MDB_cursor_op op) {
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
