// Internal to libq: moving a queue's messages out of and into a file
// (`q export`, `q import`), over a QueueView the broker opened.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libq/lmdb/queue_view.hpp"

namespace q {

// Calls `each` with every live message, then every dead letter, in id order.
void export_queue(QueueView& view, const std::function<void(const Message&)>& each);

// Stores `messages` in the (maintained) queue, all or nothing: throws before
// writing anything when one of them is refused. `next_seq` is the file's next
// message sequence, advanced past every id used. Returns the ids given, in order.
std::vector<std::string> import_into(QueueView& view, std::vector<Message> messages,
                                     std::uint64_t& next_seq);

}  // namespace q
