#include "libq/ids.hpp"

namespace q {

// ---- ids and receipts ----------------------------------------------------------
// An id is 'm' and the message's sequence number in lowercase hex; a receipt is
// the id, '.', and 16 hex digits of the delivery's nonce. Both are safe unquoted
// in a shell and never start with '-'.

std::string message_id(std::uint64_t seq) {
  static const char digits[] = "0123456789abcdef";
  char buf[17];
  int n = 0;
  do {
    buf[n++] = digits[seq & 0xF];
    seq >>= 4;
  } while (seq != 0);
  std::string id = "m";
  while (n > 0) id.push_back(buf[--n]);
  return id;
}

namespace {
std::optional<std::uint64_t> parse_hex(std::string_view s, std::size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}
}  // namespace

std::optional<std::uint64_t> parse_message_id(std::string_view id) {
  if (id.size() < 2 || id[0] != 'm') return std::nullopt;
  if (id.size() > 2 && id[1] == '0') return std::nullopt;  // one spelling per id
  return parse_hex(id.substr(1), 16);
}

std::string receipt(std::uint64_t seq, std::uint64_t nonce) {
  static const char digits[] = "0123456789abcdef";
  std::string r = message_id(seq);
  r.push_back('.');
  for (int i = 15; i >= 0; --i) r.push_back(digits[(nonce >> (i * 4)) & 0xF]);
  return r;
}

std::optional<ParsedReceipt> parse_receipt(std::string_view text) {
  auto dot = text.find('.');
  if (dot == std::string_view::npos || text.size() - dot - 1 != 16) return std::nullopt;
  auto seq = parse_message_id(text.substr(0, dot));
  auto nonce = parse_hex(text.substr(dot + 1), 16);
  if (!seq || !nonce || *nonce == 0) return std::nullopt;
  return ParsedReceipt{*seq, *nonce};
}

}  // namespace q
