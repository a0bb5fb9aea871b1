// Txn and Cursor: every LMDB transaction and cursor of the file, with the
// writer lock, the doorbell and LMDB's errors handled once.
#include "libq/lmdb/store.hpp"
#include "libq/lmdb/env_detail.hpp"

#include <sys/mman.h>

#include <cstring>

#include <fmt/format.h>

#include "libq/lmdb/records.hpp"
#include "libq/lmdb/upgrade.hpp"

namespace q::store {

// ---- Txn --------------------------------------------------------------------

Txn::Txn(Env& env, Mode mode, bool meta_sync_later) : env_(env), write_(mode == Write) {
  if (env_.damaged())
    throw Error(ErrorKind::Io,
                fmt::format("{}: the file is damaged (LMDB reported it earlier)", env_.path()));
  env_.reopen_if_published();
  env_.refuse_if_replaced();
  if (mode == Write && env_.no_lock()) throw read_only_mount(env_.path());
  if (mode == Write && env_.read_only())
    throw Error(ErrorKind::Permission,
                fmt::format("{}: opened read-only (this user may not write it)", env_.path()));
  if (mode == Write) {
    env_.clear_dead_readers_now_and_then();
    env_.lock_writer();
    locked_ = true;
  }
  if (mode == Read && env_.no_lock()) {
    env_.lock_snapshot();  // see Env::attach_without_lock_file
    shared_ = true;
  }
  unsigned flags = mode == Read ? MDB_RDONLY : meta_sync_later ? MDB_NOMETASYNC : 0;
  int rc = mdb_txn_begin(env_.handle(), nullptr, flags, &txn_);
  if (rc != 0) {
    txn_ = nullptr;
    if (locked_) env_.unlock_writer();
    if (shared_) env_.unlock_snapshot();
    shared_ = false;
    // LMDB marks its reader slot by locking the byte of this process's pid in
    // FILE-lock: a process of another PID namespace with the same pid holds
    // it (issue 25 item 10). LMDB cannot tell the two apart; say so.
    if (rc == EAGAIN || rc == EACCES)
      throw Error(ErrorKind::Busy,
                  fmt::format("{}: cannot begin transaction: a process of another PID namespace "
                              "(a container) with this process's pid {} uses the file; LMDB's "
                              "reader table tells processes apart by pid alone, so processes of "
                              "several PID namespaces can share a queue file only while their "
                              "pids differ: run them in one PID namespace (docker run "
                              "--pid=host or --pid=container:NAME)",
                              env_.path(), ::getpid()));
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
  if (shared_) env_.unlock_snapshot();
}

void Txn::commit() {
  int rc;
  {
    InLmdb in_lmdb;
    rc = mdb_txn_commit(txn_);
  }
  txn_ = nullptr;
  if (shared_) env_.unlock_snapshot();
  shared_ = false;
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
