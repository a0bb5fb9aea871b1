// Shared by the unit tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <string>

#include <lmdb.h>

#include "libq/error.hpp"

namespace q::testing {

// The kind of the q::Error that `f` throws; a test failure when it throws none.
inline ErrorKind error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error thrown";
  return ErrorKind::Usage;
}

// Changes a queue file behind q's back: `f` runs in a write transaction on the
// named database of the (closed) file at `path`.
inline void poke(const std::string& path, const char* db,
                 const std::function<void(MDB_txn*, MDB_dbi)>& f) {
  MDB_env* env;
  ASSERT_EQ(mdb_env_create(&env), 0);
  mdb_env_set_maxdbs(env, 32);
  mdb_env_set_mapsize(env, std::size_t{1} << 40);
  ASSERT_EQ(mdb_env_open(env, path.c_str(), MDB_NOSUBDIR, 0644), 0);
  MDB_txn* txn;
  MDB_dbi dbi;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  ASSERT_EQ(mdb_dbi_open(txn, db, 0, &dbi), 0);
  f(txn, dbi);
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/q-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace q::testing
