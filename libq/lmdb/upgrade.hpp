// Upgrading an older queue file to the format this build writes, in place.
#pragma once

#include "libq/lmdb/store.hpp"

namespace q::store {

// Rewrites every record whose layout changed since format 1 (dedup, done, head,
// group and meta values, which gained a checksum and a version byte) and sets
// `q-format` to kFormatVersion, inside `txn`, a write transaction: the file is
// upgraded when it commits, or not at all. Throws Error(Io) naming the entry
// when a format-1 value has the wrong size (the file is then left as it was).
void upgrade_file(Txn& txn);

}  // namespace q::store
