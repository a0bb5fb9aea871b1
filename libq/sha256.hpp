// SHA-256, for content-based deduplication of FIFO queues.
#pragma once

#include <string>
#include <string_view>

namespace q {

// Lowercase hex digest of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace q
