// Reads a fuzzer's input as a stream of choices; past the end every read is 0,
// so every input, however short, is a complete program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qfuzz {

class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool empty() const { return i_ >= n_; }
  std::uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  std::uint32_t u16() { return u8() | (std::uint32_t{u8()} << 8); }
  std::uint32_t below(std::uint32_t n) { return n <= 256 ? u8() % n : u16() % n; }
  bool coin() { return u8() & 1; }
  // A short string of bytes from the input (at most `max`).
  std::string str(std::size_t max) {
    std::size_t len = below(static_cast<std::uint32_t>(max) + 1);
    std::string s;
    for (std::size_t k = 0; k < len && !empty(); ++k) s.push_back(static_cast<char>(u8()));
    return s;
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t i_ = 0;
};

}  // namespace qfuzz
