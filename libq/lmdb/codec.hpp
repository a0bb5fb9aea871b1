// Internal to libq/lmdb: the bytes of the file's records and keys. A record
// starts with a CRC-32C of the rest (Writer::seal, Reader checks it); keys are
// big-endian so LMDB's byte order is numeric order.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "libq/clock.hpp"

namespace q::store {

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);

// ---- byte writer and reader ------------------------------------------------------

class Writer {
 public:
  Writer() = default;
  // A record: the checksum slot (see begin), then its version byte.
  explicit Writer(std::uint8_t version) {
    begin();
    u8(version);
  }
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void tail(std::string_view s) { out_.append(s); }
  // Reserves the checksum slot; seal() fills it.
  void begin() { out_.assign(4, '\0'); }
  std::string seal() {
    std::uint32_t crc = crc32c(out_.data() + 4, out_.size() - 4);
    std::memcpy(out_.data(), &crc, 4);
    return std::move(out_);
  }

 private:
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  // Checks the checksum; ok() is false from then on when it does not match.
  explicit Reader(std::string_view bytes) : in_(bytes) {
    std::uint32_t stored = 0;
    if (!take(&stored, 4)) return;
    ok_ = stored == crc32c(in_.data(), in_.size());
  }
  bool ok() const { return ok_; }
  std::uint8_t u8() {
    std::uint8_t v = 0;
    take(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    take(&v, 4);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    take(&v, 8);
    return v;
  }
  std::int64_t i64() {
    std::int64_t v = 0;
    take(&v, 8);
    return v;
  }
  std::string str() {
    std::uint32_t n = u32();
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  std::string rest() {
    std::string s(in_);
    in_ = {};
    return s;
  }
  bool done() const { return ok_ && in_.empty(); }

 private:
  bool take(void* p, std::size_t n) {
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return false;
    }
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  std::string_view in_;
  bool ok_ = true;
};

inline void put_be32(std::string& s, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (i * 8)) & 0xFF));
}
inline void put_be64(std::string& s, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>((v >> (i * 8)) & 0xFF));
}
inline std::uint64_t get_be(std::string_view s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes && at + i < s.size(); ++i)
    v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Times before the epoch are clamped: keys order unsigned.
inline std::uint64_t time_bits(Millis t) { return t < 0 ? 0 : static_cast<std::uint64_t>(t); }

// Format 1 stored these values as bare native-endian integers.
template <typename T>
std::optional<T> bare(std::string_view bytes, std::size_t at = 0) {
  T v{};
  if (bytes.size() < at + sizeof v) return std::nullopt;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

}  // namespace q::store
