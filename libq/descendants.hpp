// The process tree of a lease holder (issue 25 item 9).
#pragma once

#include <string>

#include "libq/broker.hpp"

namespace q {

// A holder's commands may outlive it (a grandchild, a command that ignores
// SIGTERM or runs setuid): its leases must not be released while they still
// run. hold_descendants takes a shared OFD lock on one byte of FILE-wake
// (FILE: `queue_file`), the byte of the holder's pid and pid namespace, on a
// descriptor that is not close-on-exec: every command the holder starts, and
// every process they start, inherits it, and the lock lasts until the last of
// them has exited (or closed it). Returns the descriptor, or -1 (no
// FILE-wake: the leases are then released when the holder itself is gone).
// descendants_alive tells whether anyone still holds that byte: a holder
// whose process is gone lives on while it does. Nobody's POSIX locks are
// affected: q takes none on FILE-wake, and LMDB takes its own on FILE-lock.
int hold_descendants(const std::string& queue_file, const Holder& holder);
bool descendants_alive(const std::string& queue_file, const Holder& holder);

}  // namespace q
