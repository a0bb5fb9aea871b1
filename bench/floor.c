/* The physical floor for q: the least any LMDB-backed queue can do per
 * operation on this disk.
 *
 *   floor FILE            open FILE, put one 100-byte record, commit durably, exit
 *   floor FILE -n N       the in-process loop twin: N transactions of one record
 *                         each, every commit durable; prints nanoseconds per commit
 *   floor FILE --lines    the bulk floor: every line of stdin one record, all in one
 *                         durable transaction
 *
 * The environment is opened the way q opens its file (one file, MDB_NOSUBDIR,
 * no read-ahead, a 1 TiB map, synced commits), so the only difference left
 * between this and `q send` is the queue itself.
 *
 * Build: cc -O2 -o floor floor.c -llmdb
 */
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, int rc) {
  fprintf(stderr, "floor: %s: %s\n", what, mdb_strerror(rc));
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A unique, increasing key without reading anything: the time and the pid. */
static void make_key(unsigned char key[16], uint64_t seq) {
  uint64_t t = now_ns();
  uint64_t p = ((uint64_t)getpid() << 32) | (seq & 0xffffffffu);
  for (int i = 0; i < 8; i++) {
    key[i] = (unsigned char)(t >> (56 - 8 * i));
    key[8 + i] = (unsigned char)(p >> (56 - 8 * i));
  }
}

static MDB_env *open_env(const char *path) {
  MDB_env *env;
  int rc = mdb_env_create(&env);
  if (rc) die("mdb_env_create", rc);
  mdb_env_set_mapsize(env, (size_t)1 << 40);
  rc = mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD, 0666);
  if (rc) die(path, rc);
  return env;
}

static void put_one(MDB_env *env, uint64_t seq) {
  static char body[100];
  if (!body[0]) memset(body, 'x', sizeof body);
  MDB_txn *txn;
  MDB_dbi dbi;
  unsigned char key[16];
  int rc = mdb_txn_begin(env, NULL, 0, &txn);
  if (rc) die("mdb_txn_begin", rc);
  rc = mdb_dbi_open(txn, NULL, 0, &dbi);
  if (rc) die("mdb_dbi_open", rc);
  make_key(key, seq);
  MDB_val k = {sizeof key, key}, v = {sizeof body, body};
  rc = mdb_put(txn, dbi, &k, &v, 0);
  if (rc) die("mdb_put", rc);
  rc = mdb_txn_commit(txn);
  if (rc) die("mdb_txn_commit", rc);
}

static void put_lines(MDB_env *env) {
  MDB_txn *txn;
  MDB_dbi dbi;
  int rc = mdb_txn_begin(env, NULL, 0, &txn);
  if (rc) die("mdb_txn_begin", rc);
  rc = mdb_dbi_open(txn, NULL, 0, &dbi);
  if (rc) die("mdb_dbi_open", rc);
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  uint64_t seq = 0;
  /* Keys in increasing order, as a queue appends. */
  uint64_t base = now_ns();
  while ((len = getline(&line, &cap, stdin)) > 0) {
    if (line[len - 1] == '\n') len--;
    unsigned char key[16];
    uint64_t s = seq++;
    for (int i = 0; i < 8; i++) {
      key[i] = (unsigned char)(base >> (56 - 8 * i));
      key[8 + i] = (unsigned char)(s >> (56 - 8 * i));
    }
    MDB_val k = {sizeof key, key}, v = {(size_t)len, line};
    rc = mdb_put(txn, dbi, &k, &v, MDB_APPEND);
    if (rc == MDB_KEYEXIST) rc = mdb_put(txn, dbi, &k, &v, 0); /* older keys present */
    if (rc) die("mdb_put", rc);
  }
  free(line);
  rc = mdb_txn_commit(txn);
  if (rc) die("mdb_txn_commit", rc);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: floor FILE [-n N | --lines]\n");
    return 64;
  }
  MDB_env *env = open_env(argv[1]);
  if (argc == 4 && strcmp(argv[2], "-n") == 0) {
    long n = atol(argv[3]);
    if (n < 1) n = 1;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) put_one(env, (uint64_t)i);
    uint64_t t1 = now_ns();
    printf("%.0f\n", (double)(t1 - t0) / (double)n);
  } else if (argc == 3 && strcmp(argv[2], "--lines") == 0) {
    put_lines(env);
  } else if (argc == 2) {
    put_one(env, 0);
  } else {
    fprintf(stderr, "usage: floor FILE [-n N | --lines]\n");
    return 64;
  }
  mdb_env_close(env);
  return 0;
}
