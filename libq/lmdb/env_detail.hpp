// Internal to the LMDB layer (lmdb/store.cpp, lmdb/open.cpp,
// lmdb/file_checks.cpp): what opening a file, checking it and running
// transactions on it share.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "libq/lmdb/store.hpp"

namespace q::store {

inline MDB_val as_val(std::string_view s) { return MDB_val{s.size(), const_cast<char*>(s.data())}; }

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

// LMDB's magic number, in every meta page of an LMDB file.
constexpr std::uint32_t kLmdbMagic = 0xBEEFC0DE;

inline bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Throws the Error for a failed system call on `path` (the kind from `err`).
// The file system of `path` is mounted read-only (statvfs ST_RDONLY).
bool on_read_only_mount(const std::string& path);
// "PATH: the queue file is on a read-only file system ...", ErrorKind::ReadOnly.
Error read_only_mount(const std::string& path);
[[noreturn]] void fail_errno(int err, const std::string& path, const std::string& doing);

// EACCES on a queue file: say which of the file, its lock file and its
// directory lacks which permission for this user, and how to share it.
[[noreturn]] void fail_access(const std::string& path, const std::string& doing);

// "mode 0640, owner uid 1000 gid 1000", for messages about permissions.
std::string describe_owner(const struct stat& st);

// The handler set_notice_handler installed (nullptr: none).
NoticeHandler notice_handler();

}  // namespace q::store
