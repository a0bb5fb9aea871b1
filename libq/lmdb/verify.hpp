// `q verify`: a read-only walk over a whole queue file that checks every
// record's checksum, every index entry against its record, and the counters
// against actual counts.
#pragma once

#include <string>
#include <vector>

#include "libq/lmdb/store.hpp"

namespace q::store {

// What is wrong, one line each (at most a thousand); empty when consistent.
std::vector<std::string> verify_file(Txn& txn, const Databases& db, Millis now);

}  // namespace q::store
