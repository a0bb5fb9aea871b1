// The digests q serve needs, from OpenSSL: SHA-256 and HMAC-SHA256 for
// Signature Version 4, MD5 for the MD5OfMessageBody SQS replies carry.
#pragma once

#include <string>
#include <string_view>

namespace serve {

std::string sha256(std::string_view data);  // raw 32 bytes
std::string hmac_sha256(std::string_view key, std::string_view data);
std::string md5(std::string_view data);  // raw 16 bytes
std::string hex(std::string_view bytes);
// Compares in time independent of where the strings differ.
bool same_secret(std::string_view a, std::string_view b);
std::string base64_encode(std::string_view bytes);
// Empty optional-like: false when `text` is not base64.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace serve
