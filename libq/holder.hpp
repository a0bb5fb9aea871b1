// Telling whether the process holding a lease still lives (issue 14). A pid
// alone could name another process by now; the pid with its start time
// cannot.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "libq/broker.hpp"

namespace q {

// The process `pid` as a holder; nullopt when there is no such process (or it
// has exited and not been reaped yet).
std::optional<Holder> find_holder(std::uint32_t pid);

// Whether `holder` still runs: false only when it certainly does not (no such
// pid, a zombie, or another process's start time under its pid). A stopped
// process lives. A process that cannot be judged from here is taken as alive:
// one of another pid namespace (its pid means another process here), or one
// whose /proc entry is hidden (hidepid) while kill(pid, 0) finds it (EPERM:
// another user's process).
bool holder_alive(const Holder& holder);

using HolderProbe = std::function<bool(const Holder&)>;

}  // namespace q
