#include "libq/lmdb/codec.hpp"

#include <array>

#include "libq/lmdb/records.hpp"

namespace q::store {
namespace {

// ---- CRC-32C (Castagnoli), hardware instruction where the CPU has it ----------

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

std::uint32_t crc32c_table(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  static const auto table = make_crc_table();
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const unsigned char* p, std::size_t n,
                                                             std::uint32_t crc) {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n > 0) {
    c32 = __builtin_ia32_crc32qi(c32, *p++);
    --n;
  }
  return c32;
}
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  crc = has_sse42 ? crc32c_sse42(p, size, crc) : crc32c_table(p, size, crc);
#else
  crc = crc32c_table(p, size, crc);
#endif
  return ~crc;
}

// ---- keys -------------------------------------------------------------------

std::string key_q(std::uint32_t qid) {
  std::string k;
  put_be32(k, qid);
  return k;
}
std::string key_q_seq(std::uint32_t qid, std::uint64_t seq) {
  std::string k = key_q(qid);
  put_be64(k, seq);
  return k;
}
std::string key_q_time_seq(std::uint32_t qid, Millis time, std::uint64_t seq) {
  std::string k = key_q(qid);
  put_be64(k, time_bits(time));
  put_be64(k, seq);
  return k;
}
std::string key_q_bytes(std::uint32_t qid, std::string_view bytes) {
  std::string k = key_q(qid);
  k.append(bytes);
  return k;
}
std::string key_q_time_bytes(std::uint32_t qid, Millis time, std::string_view bytes) {
  std::string k = key_q(qid);
  put_be64(k, time_bits(time));
  k.append(bytes);
  return k;
}
std::string key_seq(std::uint64_t seq) {
  std::string k;
  put_be64(k, seq);
  return k;
}
std::uint32_t key_qid(std::string_view key) {
  return static_cast<std::uint32_t>(get_be(key, 0, 4));
}
Millis key_time(std::string_view key) { return static_cast<Millis>(get_be(key, 4, 8)); }
std::uint64_t key_time_seq(std::string_view key) { return get_be(key, 12, 8); }
std::uint64_t key_q_seq_seq(std::string_view key) { return get_be(key, 4, 8); }
std::string_view key_time_bytes(std::string_view key) {
  return key.size() > 12 ? key.substr(12) : std::string_view{};
}

}  // namespace q::store
