#include "libq/lmdb/upgrade.hpp"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "libq/lmdb/records.hpp"

namespace q::store {
namespace {

// Re-encodes every value of `dbi`. Values are collected first: LMDB cursors
// must not walk a database that is being written.
void rewrite_all(Txn& txn, MDB_dbi dbi, const char* name,
                 const std::function<std::optional<std::string>(std::string_view)>& convert) {
  std::vector<std::pair<std::string, std::string>> changed;
  {
    Cursor c(txn, dbi);
    for (bool ok = c.first(); ok; ok = c.next()) {
      auto value = convert(c.value());
      if (!value)
        throw Error(ErrorKind::Io,
                    fmt::format("{}: cannot upgrade the file from format 1: an entry of {} is "
                                "damaged (run 'q verify' or restore a backup)",
                                txn.env().path(), name));
      changed.emplace_back(std::string(c.key()), std::move(*value));
    }
  }
  for (const auto& [key, value] : changed) txn.put(dbi, key, value);
}

}  // namespace

void upgrade_file(Txn& txn) {
  const Databases& db = txn.env().db();
  const std::uint32_t from = txn.format();
  if (from >= kFormatVersion) return;
  // Format 1 -> 2: the values below gained a CRC-32C and a version byte.
  rewrite_all(txn, db.dedup, "dedup", [&](std::string_view v) -> std::optional<std::string> {
    auto d = decode_dedup(v, from);
    return d ? std::optional(encode(*d)) : std::nullopt;
  });
  rewrite_all(txn, db.done, "done", [&](std::string_view v) -> std::optional<std::string> {
    auto d = decode_done(v, from);
    return d ? std::optional(encode(*d)) : std::nullopt;
  });
  rewrite_all(txn, db.groups, "groups", [&](std::string_view v) -> std::optional<std::string> {
    auto g = decode_group(v, from);
    return g ? std::optional(encode(*g)) : std::nullopt;
  });
  rewrite_all(txn, db.heads, "heads", [&](std::string_view v) -> std::optional<std::string> {
    auto group = decode_head(v, from);
    return group ? std::optional(encode_head(*group)) : std::nullopt;
  });
  for (const char* key : {kNextSeqKey, kNextQidKey}) {
    auto bytes = txn.get(db.meta, key);
    if (!bytes) continue;
    auto v = decode_meta_number(*bytes, from);
    if (!v)
      throw Error(ErrorKind::Io,
                  fmt::format("{}: cannot upgrade the file from format 1: meta {} is damaged "
                              "(run 'q verify' or restore a backup)",
                              txn.env().path(), key));
    txn.put(db.meta, key, encode_meta_number(*v));
  }
  txn.put(db.meta, kFormatKey, encode_format(kFormatVersion));
}

}  // namespace q::store
