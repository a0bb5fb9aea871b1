// Durations and times as users type them (libq/timefmt.hpp): no input crashes
// the parsers or overflows (UBSan), a parsed duration is never negative, and
// parsing what q prints gives the value back.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "libq/timefmt.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto d = q::parse_duration(text)) {
    if (*d < 0) std::abort();
    auto again = q::parse_duration(q::format_duration(*d));
    if (!again || *again != *d) std::abort();
  }
  if (auto t = q::parse_time(text)) {
    // Years 0000-9999 print in RFC 3339 and must read back.
    if (*t >= -62167219200000 && *t < 253402300800000) {
      auto again = q::parse_time(q::format_time(*t));
      if (!again || *again != *t) std::abort();
    }
  }
  return 0;
}
