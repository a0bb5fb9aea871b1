// LMDB trusts the pages it maps: a damaged queue file (bytes changed on disk, or
// the file cut short while in use) can send it to an address outside the map
// (SIGSEGV) or past the end of the file (SIGBUS), make it overrun a heap block
// (glibc aborts), or loop forever inside one call. Instead, q says which file
// is damaged and exits 74, as for any other damage it detects.
#pragma once

#include <string>

namespace cli {

// From now on: SIGSEGV and SIGBUS, SIGABRT after an LMDB call, and two seconds
// of CPU time inside one LMDB call print one line naming `queue_file` and exit
// 74.
void report_crashes_as_damage(const std::string& queue_file);

}  // namespace cli
