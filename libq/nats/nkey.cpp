#include "libq/nats/nkey.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "libq/error.hpp"

namespace q::nats {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr std::uint8_t kPrefixSeed = 18 << 3;  // 'S'
constexpr std::uint8_t kPrefixUser = 20 << 3;  // 'U'

std::uint16_t crc16(const std::uint8_t* data, std::size_t n) {  // XMODEM, as nkeys
  std::uint16_t crc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= static_cast<std::uint16_t>(data[i]) << 8;
    for (int b = 0; b < 8; ++b)
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
  }
  return crc;
}

bool base32_decode(const std::string& text, std::vector<std::uint8_t>& out) {
  std::uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    const char* at = c ? std::char_traits<char>::find(kAlphabet, 32, c) : nullptr;
    if (!at) return false;
    buffer = (buffer << 5) | static_cast<std::uint32_t>(at - kAlphabet);
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>(buffer >> bits));
    }
  }
  return true;
}

std::string base32_encode(const std::vector<std::uint8_t>& data) {
  std::string out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (std::uint8_t byte : data) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += kAlphabet[(buffer >> bits) & 31];
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 31];
  return out;
}

}  // namespace

std::string read_nkey_seed(const std::string& path, const char* variable) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos) continue;
    auto end = line.find_last_not_of(" \t\r");
    std::string word = line.substr(start, end - start + 1);
    if (word.compare(0, 2, "SU") == 0) return word;
  }
  throw Error(
      ErrorKind::InvalidData,
      fmt::format("{} {}: no NKey user seed (a line starting with SU) in it", variable, path));
}

void check_creds_file(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  bool jwt = false;
  while (std::getline(in, line)) {
    auto start = line.find_first_not_of(" \t\r");
    // a JWT: base64url of {"typ":"JWT",... (eyJ), a payload and a signature
    if (start != std::string::npos && line.compare(start, 3, "eyJ") == 0 &&
        std::count(line.begin(), line.end(), '.') == 2)
      jwt = true;
  }
  if (!jwt)
    throw Error(ErrorKind::InvalidData,
                fmt::format("NATS_CREDS {}: no user JWT in it (a .creds file made by nsc holds the "
                            "user's JWT and NKey seed)",
                            path));
  std::string seed = read_nkey_seed(path, "NATS_CREDS");
  nkey_public_key(seed, "NATS_CREDS " + path);
  std::fill(seed.begin(), seed.end(), '\0');
}

std::string nkey_public_key(const std::string& seed, const std::string& what) {
  auto bad = [&] {
    throw Error(ErrorKind::InvalidData, fmt::format("{}: not an NKey user seed", what));
  };
  std::vector<std::uint8_t> raw;
  if (!base32_decode(seed, raw) || raw.size() != 2 + 32 + 2) bad();
  std::uint16_t crc = static_cast<std::uint16_t>(raw[34] | (raw[35] << 8));
  if (crc16(raw.data(), 34) != crc) bad();
  if ((raw[0] & 0xf8) != kPrefixSeed) bad();
  std::uint8_t kind = static_cast<std::uint8_t>(((raw[0] & 7) << 5) | ((raw[1] & 0xf8) >> 3));
  if (kind != kPrefixUser) bad();
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw.data() + 2, 32);
  std::vector<std::uint8_t> pub(1 + 32);
  std::size_t len = 32;
  bool ok = key && EVP_PKEY_get_raw_public_key(key, pub.data() + 1, &len) == 1 && len == 32;
  EVP_PKEY_free(key);
  std::fill(raw.begin(), raw.end(), 0);
  if (!ok) bad();
  pub[0] = kPrefixUser;
  std::uint16_t pcrc = crc16(pub.data(), pub.size());
  pub.push_back(static_cast<std::uint8_t>(pcrc & 0xff));
  pub.push_back(static_cast<std::uint8_t>(pcrc >> 8));
  return base32_encode(pub);
}

}  // namespace q::nats
