#include "libq/location.hpp"

#include <cctype>

#include <fmt/format.h>

#include "libq/error.hpp"

namespace q {
namespace {

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::char_traits<char>::length(prefix), prefix) == 0;
}

// Where the part after "SCHEME:" and its slashes begins; npos when the
// location is no URL.
std::size_t authority_start(const std::string& location) {
  if (!looks_like_url(location)) return std::string::npos;
  std::size_t at = location.find(':') + 1;
  while (at < location.size() && location[at] == '/') ++at;
  return at;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool is_nats_location(const std::string& location) {
  return starts_with(location, "nats://") || starts_with(location, "tls://");
}

bool looks_like_url(const std::string& location) {
  if (starts_with(location, "nats:") || starts_with(location, "tls:")) return true;
  if (location.empty() || !std::isalpha(static_cast<unsigned char>(location[0]))) return false;
  std::size_t i = 1;
  while (i < location.size() && (std::isalnum(static_cast<unsigned char>(location[i])) ||
                                 location[i] == '+' || location[i] == '-' || location[i] == '.'))
    ++i;
  return i + 1 < location.size() && location[i] == ':' && location[i + 1] == '/';
}

void check_location_scheme(const std::string& location) {
  if (!looks_like_url(location) || is_nats_location(location)) return;
  throw Error(ErrorKind::Usage, fmt::format("location '{}': not a queue location: use {}",
                                            redact_location(location), kLocationForms));
}

std::string redact_location(const std::string& location) {
  std::size_t start = authority_start(location);
  if (start == std::string::npos) return location;
  std::size_t at = location.rfind('@');
  if (at == std::string::npos || at < start) return location;
  std::string info = location.substr(start, at - start);
  std::size_t colon = info.find(':');
  std::string shown = colon == std::string::npos ? "***" : info.substr(0, colon) + ":***";
  return location.substr(0, start) + shown + location.substr(at);
}

std::string percent_decode(const std::string& s, bool plus_is_space) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    int hi = 0, lo = 0;
    if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && (hi = hex_value(s[i + 1])) >= 0 &&
               (lo = hex_value(s[i + 2])) >= 0) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

SplitLocation split_user_info(const std::string& location) {
  SplitLocation out{std::nullopt, location};
  std::size_t start = authority_start(location);
  if (start == std::string::npos) return out;
  std::size_t at = location.rfind('@');
  if (at == std::string::npos || at < start) return out;
  std::string info = location.substr(start, at - start);
  UserInfo user;
  std::size_t colon = info.find(':');
  user.user = percent_decode(info.substr(0, colon));
  if (colon != std::string::npos) user.password = percent_decode(info.substr(colon + 1));
  out.user_info = user;
  out.rest = location.substr(0, start) + location.substr(at + 1);
  return out;
}

}  // namespace q
