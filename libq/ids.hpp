// Message ids and receipts, the same on every backend: an id is 'm' and the
// message's sequence number in lowercase hex; a receipt is the id, '.', and 16
// hex digits of the delivery's nonce. Both are safe unquoted in a shell and
// never start with '-'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace q {

// ---- message ids and receipts ------------------------------------------------
std::string message_id(std::uint64_t seq);
std::optional<std::uint64_t> parse_message_id(std::string_view id);
std::string receipt(std::uint64_t seq, std::uint64_t nonce);
struct ParsedReceipt {
  std::uint64_t seq;
  std::uint64_t nonce;
};
std::optional<ParsedReceipt> parse_receipt(std::string_view text);

}  // namespace q
