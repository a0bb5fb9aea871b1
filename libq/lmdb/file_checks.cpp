#include "libq/lmdb/store.hpp"
#include "libq/lmdb/env_detail.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>

namespace q::store {

namespace {

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

// The start of LMDB 0.9's MDB_env: its descriptors of the data file, the lock
// file and the data file again (for synced meta writes). mdb_env_get_fd()
// gives only the first; it is also how this layout is checked before use.
struct LmdbEnvHead {
  int data_fd, lock_fd, meta_fd;
};
}  // namespace

// ---- Env: checks that LMDB opened the right, whole file --------------------

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

}  // namespace q::store
