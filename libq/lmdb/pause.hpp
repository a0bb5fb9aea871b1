// Internal to libq: a queue's pause (`q pause`), one record per queue in
// `pauses`, read by every receive (one get) and by stats.
#pragma once

#include <optional>

#include <fmt/format.h>

#include "libq/broker.hpp"
#include "libq/lmdb/store.hpp"
#include "libq/lmdb/records.hpp"

namespace q {

// The pause in force at `now`, if any (one that has ended is as good as none).
inline std::optional<Pause> active_pause(store::Txn& txn, const store::Databases& db,
                                         std::uint32_t qid, const std::string& queue, Millis now) {
  auto bytes = txn.get(db.pauses, store::key_q(qid));
  if (!bytes) return std::nullopt;
  auto pause = store::decode_pause(*bytes);
  if (!pause)
    throw Error(ErrorKind::Io,
                fmt::format("{}: queue {}: its pause record is damaged (checksum mismatch; run "
                            "'q verify' or restore a backup)",
                            txn.env().path(), queue));
  if (pause->until != 0 && pause->until <= now) return std::nullopt;
  return pause;
}

}  // namespace q
