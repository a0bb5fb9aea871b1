// Internal to libq: which messages a receive takes, in what order.
#pragma once

#include <cstdint>
#include <functional>

#include "libq/lmdb/queue_view.hpp"

namespace q {

// Delivers a picked message, or dead-letters it; true when delivered.
using Deliver = std::function<bool(std::uint64_t, Header, GroupEdit*)>;

// Standard queue: the oldest ready messages first, up to `want` delivered.
void pick_standard(QueueView& view, std::uint64_t want, const Deliver& deliver);

// FIFO queue: in order of visible time and send order, each group in order.
void pick_fifo(QueueView& view, std::uint64_t want, bool one_per_group, const Deliver& deliver);

}  // namespace q
