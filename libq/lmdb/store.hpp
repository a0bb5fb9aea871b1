// The LMDB layer: opening a queue file safely, transactions, cursors, and the
// translation of LMDB and system errors into q::Error. Nothing here knows what
// a message is.
#pragma once

#include <lmdb.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libq/lmdb/bell.hpp"
#include "libq/clock.hpp"
#include "libq/error.hpp"

namespace q::store {

// Keys of the meta database.
constexpr const char* kFormatKey = "q-format";   // encode_format: the file's format
constexpr const char* kNextSeqKey = "next-seq";  // encode_meta_number: the next message's seq
constexpr const char* kNextQidKey = "next-qid";  // encode_meta_number: the next queue's id

// What this process is doing inside LMDB, for a watchdog outside libq (the
// CLI's): LMDB trusts its pages, and a damaged one can make it loop forever
// inside a single call. Plain stores, cheap enough for every call.
struct LmdbActivity {
  volatile std::sig_atomic_t inside = 0;   // 1 while in a call that reads or writes pages
  volatile unsigned long calls = 0;        // such calls started so far
  volatile std::sig_atomic_t damaged = 0;  // LMDB has reported a damaged page
};
extern LmdbActivity g_lmdb_activity;

// Something a user should know that is not an error (libq never prints): the
// CLI installs a handler that prints it on standard error.
using NoticeHandler = void (*)(const std::string& message);
void set_notice_handler(NoticeHandler handler);

struct OpenOptions {
  std::string path;
  bool create = false;  // create the file (and its directories) when missing
  bool durable = true;  // false: commits are not synced (MDB_NOSYNC)
  Millis lock_timeout = 10 * kSecond;
  // Read transactions only (MDB_RDONLY), for a user who may read the file
  // but not write it: needs read permission on FILE and read and write
  // permission on FILE-lock (LMDB's reader table: every reader writes its
  // slot there), which must exist. Write transactions are refused.
  bool read_only = false;
};

// The handle of a database that a file made by an older q lacks, opened
// read-only (a writer creates it on its first open): reads find nothing.
constexpr MDB_dbi kAbsentDbi = ~MDB_dbi{0};

struct Databases {
  MDB_dbi meta, queues, messages, bodies, ready, delayed, leases, age, dead, dead_expiry, dedup,
      dedup_expiry, done, done_expiry, groups, group_messages, heads, attempts, workers, pauses;
};

class Txn;

class Env {
 public:
  // Checks the file before LMDB touches it (network filesystem, LMDB magic,
  // library version), opens it, clears stale readers, and checks the format.
  static std::unique_ptr<Env> open(const OpenOptions& options);
  ~Env();
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  MDB_env* handle() const { return env_; }
  const std::string& path() const { return options_.path; }
  const Databases& db() const { return db_; }
  bool read_only() const { return options_.read_only; }
  // Opened read-only without FILE-lock (MDB_NOLOCK), the file being on a
  // read-only mount: each read transaction holds a shared flock on the file.
  bool no_lock() const { return no_lock_; }
  void lock_snapshot();
  void unlock_snapshot();
  // Unmaps from this process the file's pages it has touched (the page cache
  // keeps them; the next access maps them again). A long stream of bulk
  // commits reads the pages each previous commit wrote, so without this a
  // sender's resident size grows with the file, not with its work.
  void drop_mapped_pages() const;
  // Makes every commit so far durable (after a Txn with meta_sync_later).
  void sync();
  // Databases the file lacks (made by an older q): a write transaction
  // creates them, and they stay once it commits.
  void create_absent(MDB_txn* txn);
  void settle_absent(bool committed);

  // The `holders` database (issue 14), which files made before it lack: a
  // write transaction with `create` makes it; nullopt when it is absent. A
  // handle opened by a write transaction is kept once that one commits.
  std::optional<MDB_dbi> holders(Txn& txn, bool create);
  void holders_committed() {
    holders_open_ = holders_open_ || holders_pending_;
    holders_pending_ = false;
  }
  void holders_aborted() { holders_pending_ = false; }

  // The writer lock is an flock on our own descriptor of the data file, taken
  // before LMDB's own mutex so that waiting for it is bounded (LMDB waits
  // forever, even for a stopped process).
  void lock_writer();
  void unlock_writer();
  // mdb_reader_check before a write transaction: once per kReaderCheckEvery,
  // or when the file has grown since the last check.
  void clear_dead_readers_now_and_then();
  // Called by the commit of a write transaction: a new file built under a
  // temporary name (stage) is renamed into place by its first commit.
  bool publish_on_commit() const { return publish_on_commit_; }
  void publish();
  void reopen_if_published();
  // Tells waiting processes that a commit is visible: rings the bell
  // (FILE-wake) and touches the file's times for inotify watchers (IN_ATTRIB).
  void announce_commit();
  // After a commit: tells the notice handler, once, that this process cannot
  // ring the doorbell (see set_notice_handler).
  void notice_bell_problem();
  // The doorbell of this file (opened with the file); nullptr when unavailable.
  Bell* bell();
  // Throws Error(Io) when the file's name no longer names the file this Env
  // has open (deleted, or replaced by another file): a long-running process
  // would otherwise go on using a file nobody else sees. Called by every
  // transaction (one stat).
  void refuse_if_replaced();

  [[noreturn]] void fail(int rc, const std::string& doing);
  // LMDB reported a damaged page. It may have written past a heap block of a
  // write transaction by then, so the transaction is left as it is (never
  // freed: the process ends soon) and this Env refuses further transactions.
  bool damaged() const { return damaged_; }

  // A consistent, compacted copy at `target`, written to a temporary file,
  // synced and renamed, while other processes go on using the file. The copy
  // gets the file's mode (and group, where allowed). Refuses a directory and
  // the queue's own files (by name and by inode) as `target`.
  void copy_to(const std::string& target);

  // The file's format as last seen (0 before the databases are open): it only
  // goes up, from 1 to kFormatVersion, when a write upgrades the file.
  std::uint32_t format() const { return format_; }
  void note_format(std::uint32_t format) { format_ = std::max(format_, format); }

 private:
  mutable bool map_found_ = false;
  mutable void* map_address_ = nullptr;
  mutable std::size_t map_length_ = 0;
  static constexpr std::chrono::seconds kReaderCheckEvery{1};

  explicit Env(OpenOptions options) : options_(std::move(options)) {}
  bool stage();
  void attach();
  void attach_read_only();
  void attach_without_lock_file();
  void open_lmdb(const std::string& file, int lock_fd, unsigned extra_flags);
  void verify_lmdb_files(int lock_fd);
  void remove_stale_staging(const std::string& dir);
  void refuse_own_file(const std::string& target);
  void refuse_truncated();
  struct MetaRoots {
    std::uint64_t free_root = 0;
    std::uint64_t main_root = 0;
    std::uint64_t last_page = 0;  // ~0: no valid meta page
  };
  MetaRoots newest_meta(std::uint64_t page_size) const;
  void init_databases(bool may_initialize);
  struct NamedDb {
    MDB_dbi* dbi;
    const char* name;
  };
  std::vector<NamedDb> named_databases();
  void create_databases(const std::vector<NamedDb>& all);
  Error not_ours() const;
  void lock_bounded(int fd, const std::string& what, bool shared = false);

  OpenOptions options_;
  std::unique_ptr<Bell> bell_;
  bool bell_noticed_ = false;
  MDB_env* env_ = nullptr;
  int fd_ = -1;
  // Our descriptor of FILE-lock, opened without following links before LMDB
  // opens it; kept open while LMDB's is (closing any descriptor of a file
  // drops the process's fcntl locks on it, which LMDB's reader table uses).
  int lock_fd_ = -1;
  int dir_fd_ = -1;      // locked while this process creates the file
  std::string staging_;  // the new file's temporary name until publish()
  bool publish_on_commit_ = false;
  bool reopen_ = false;
  bool damaged_ = false;
  bool no_lock_ = false;
  int snapshots_ = 0;  // open read transactions holding the shared flock (no_lock_)
  std::chrono::steady_clock::time_point next_reader_check_{};
  std::size_t last_pgno_seen_ = 0;
  Databases db_{};
  std::vector<NamedDb> absent_;
  std::uint32_t format_ = 0;
  MDB_dbi holders_dbi_ = 0;
  bool holders_open_ = false;                 // holders_dbi_ is valid in every transaction
  bool holders_pending_ = false;              // opened by the write transaction under way
  std::size_t holders_absent_at_ = SIZE_MAX;  // transaction id that found none
};

class Txn {
 public:
  enum Mode { Read, Write };
  // meta_sync_later: the commit syncs the pages it wrote but not the meta
  // page that makes them current (MDB_NOMETASYNC: the file stays intact;
  // a power cut before the next sync undoes this commit), so the caller can
  // start work on it while Env::sync() makes it durable.
  Txn(Env& env, Mode mode, bool meta_sync_later = false);
  ~Txn();
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  void commit();
  MDB_txn* handle() const { return txn_; }
  bool writes() const { return write_; }
  Env& env() const { return env_; }

  std::optional<std::string_view> get(MDB_dbi dbi, std::string_view key);
  // Long reads (export, listing dead letters) touch every page of a large
  // queue through LMDB's map, and each page read stays in the process's
  // resident memory. In a read transaction, `bytes` (a value just read and
  // copied) lies in the read-only map: its whole pages are let go (they stay
  // in the page cache), so memory follows what the reader holds, not the
  // file's size. Does nothing in a write transaction, whose values may be
  // LMDB's own buffers.
  void release_read(std::string_view bytes);
  void put(MDB_dbi dbi, std::string_view key, std::string_view value, unsigned flags = 0);
  bool del(MDB_dbi dbi, std::string_view key);  // false when the key was absent
  std::size_t entries(MDB_dbi dbi);
  // The file's format as this transaction sees it: a read of a format-1 file
  // sees 1; a write transaction upgrades such a file first (lmdb/upgrade.cpp),
  // so it always sees kFormatVersion.
  std::uint32_t format();

 private:
  Env& env_;
  MDB_txn* txn_ = nullptr;
  bool write_;
  bool locked_ = false;
  bool shared_ = false;       // holds the shared flock of a no_lock() Env
  std::uint32_t format_ = 0;  // 0: not read yet
  bool upgraded_ = false;
};

class Cursor {
 public:
  Cursor(Txn& txn, MDB_dbi dbi);
  ~Cursor();
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  bool seek(std::string_view key);  // first key >= key
  bool first();
  bool last();
  bool next();
  std::string_view key() const { return as_view(key_); }
  std::string_view value() const { return as_view(value_); }
  bool has_prefix(std::string_view prefix) const {
    return key().substr(0, prefix.size()) == prefix;
  }

 private:
  static std::string_view as_view(const MDB_val& v) {
    return {static_cast<const char*>(v.mv_data), v.mv_size};
  }
  bool move(MDB_cursor_op op);
  Txn& txn_;
  MDB_cursor* cursor_ = nullptr;
  MDB_val key_{}, value_{};
};

// The liblmdb this process runs with (mdb_version), like "0.9.24", for q --version.
std::string lmdb_library_version();

}  // namespace q::store
