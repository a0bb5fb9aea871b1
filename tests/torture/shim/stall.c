// LD_PRELOAD shim for the torture tests: stops a q process (SIGSTOP) right
// after it began its Nth read or write transaction, so a test can leave a
// reader dead inside its transaction (SIGKILL it there) or keep a writer
// stopped while it holds the writer lock.
//
//   Q_STALL=read|write   which transactions count
//   Q_STALL_AT=N         stop at the Nth of them (default 1)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <lmdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

int mdb_txn_begin(MDB_env *env, MDB_txn *parent, unsigned int flags, MDB_txn **txn) {
  static int (*real)(MDB_env *, MDB_txn *, unsigned int, MDB_txn **);
  static int seen;
  if (!real)
    real =
        (int (*)(MDB_env *, MDB_txn *, unsigned int, MDB_txn **))dlsym(RTLD_NEXT, "mdb_txn_begin");
  int rc = real(env, parent, flags, txn);
  const char *what = getenv("Q_STALL");
  if (rc == 0 && what) {
    int read_only = (flags & MDB_RDONLY) != 0;
    if ((read_only && strcmp(what, "read") == 0) || (!read_only && strcmp(what, "write") == 0)) {
      const char *at = getenv("Q_STALL_AT");
      if (++seen == (at ? atoi(at) : 1)) raise(SIGSTOP);
    }
  }
  return rc;
}
