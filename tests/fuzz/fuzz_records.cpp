// Record decoding (libq/lmdb/records.hpp): no input crashes a decoder or reads past
// its end, and whatever decodes re-encodes to exactly the same bytes (one
// spelling per record, so a damaged record can never pass for another). The
// first byte picks the record kind; with its high bit set the checksum is
// fixed up first, so the fuzzer explores the layouts behind it too.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "libq/lmdb/records.hpp"

using namespace q::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::uint8_t mode = data[0];
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((mode & 0x80) && bytes.size() >= 4) {
    std::uint32_t crc = crc32c(bytes.data() + 4, bytes.size() - 4);
    std::memcpy(bytes.data(), &crc, 4);
  }
  switch (mode & 3) {
    case 0:
      if (auto h = decode_header(bytes); h && encode(*h) != bytes) std::abort();
      break;
    case 1:
      if (auto b = decode_body(bytes); b && encode(*b) != bytes) std::abort();
      break;
    case 2:
      if (auto q = decode_queue(bytes); q && encode(*q) != bytes) std::abort();
      break;
    case 3:
      if (auto g = decode_group(bytes); g && encode(*g) != bytes) std::abort();
      break;
  }
  // Key readers take any bytes.
  (void)key_qid(bytes);
  (void)key_time(bytes);
  (void)key_time_seq(bytes);
  (void)key_q_seq_seq(bytes);
  (void)key_time_bytes(bytes);
  return 0;
}
