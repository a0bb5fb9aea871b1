// Receipt and message id parsing (libq/ids.hpp): anything that parses is
// the one spelling q prints for it, so two different strings never name the
// same delivery.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "libq/lmdb/records.hpp"

using namespace q::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto r = parse_receipt(text)) {
    if (r->nonce == 0 || receipt(r->seq, r->nonce) != text) std::abort();
  }
  if (auto seq = parse_message_id(text)) {
    if (message_id(*seq) != text) std::abort();
  }
  return 0;
}
