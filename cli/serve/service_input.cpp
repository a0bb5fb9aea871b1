#include "cli/serve/service_input.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cli/serve/service.hpp"
#include "libq/ids.hpp"

namespace serve {

using nlohmann::json;
std::string str(const json& in, const char* key) {
  auto it = in.find(key);
  if (it == in.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

bool has(const json& in, const char* key) { return in.contains(key) && !in[key].is_null(); }

std::string required(const json& in, const char* key) {
  if (!has(in, key)) throw missing_parameter(key);
  return str(in, key);
}

// A number given as a JSON number or (query protocol, attributes) as text.
std::int64_t integer(const json& v, const std::string& name, std::int64_t lo, std::int64_t hi,
                     bool attribute) {
  std::int64_t n = 0;
  bool ok = false;
  if (v.is_number_integer()) {
    n = v.get<std::int64_t>();
    ok = true;
  } else if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    ok = !s.empty() && s.size() < 19 && std::all_of(s.begin() + (s[0] == '-'), s.end(), [](char c) {
      return c >= '0' && c <= '9';
    }) && s != "-";
    if (ok) n = std::stoll(s);
  }
  if (!ok || n < lo || n > hi) {
    std::string message = fmt::format(
        "Value {} for parameter {} is invalid. Reason: must be an "
        "integer from {} to {}.",
        v.is_string() ? v.get<std::string>() : v.dump(), name, lo, hi);
    throw attribute ? invalid_attribute(message) : invalid_parameter(message);
  }
  return n;
}

std::string queue_from_url(const std::string& url) {
  if (url.empty()) throw missing_parameter("QueueUrl");
  std::string path = url;
  auto scheme = path.find("://");
  if (scheme != std::string::npos) {
    auto slash = path.find('/', scheme + 3);
    path = slash == std::string::npos ? "" : path.substr(slash);
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == kSettingsQueue)
    throw SqsError(400, "InvalidAddress", "InvalidAddress",
                   fmt::format("The address {} is not valid for this endpoint.", url));
  return name;
}

std::string queue_from_arn(const std::string& arn, const char* field) {
  // arn:aws:sqs:REGION:ACCOUNT:QUEUE
  if (arn.compare(0, 12, "arn:aws:sqs:") != 0 || std::count(arn.begin(), arn.end(), ':') != 5)
    throw invalid_parameter(
        fmt::format("Value {} for parameter {} is invalid. Reason: not an "
                    "arn:aws:sqs:REGION:ACCOUNT:QUEUE ARN.",
                    arn, field));
  return arn.substr(arn.rfind(':') + 1);
}

bool valid_batch_id(const std::string& id) {
  return !id.empty() && id.size() <= 80 && std::all_of(id.begin(), id.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_';
  });
}

// SQS accepts #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF in UTF-8.
// Returns how many bytes the character at s[i] takes when it is one of those,
// 0 when it is not (a byte that starts no character, a truncated or overlong
// sequence, a surrogate, a control character).
static std::size_t sqs_char(const std::string& s, std::size_t i) {
  unsigned char c = s[i];
  std::uint32_t cp;
  std::size_t n;
  if (c < 0x80) {
    cp = c, n = 1;
  } else if ((c & 0xE0) == 0xC0) {
    cp = c & 0x1F, n = 2;
  } else if ((c & 0xF0) == 0xE0) {
    cp = c & 0x0F, n = 3;
  } else if ((c & 0xF8) == 0xF0) {
    cp = c & 0x07, n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    unsigned char d = s[i + k];
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  bool ok = cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
            (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
  if (!ok || (n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
  return n;
}

bool valid_body(const std::string& s) {
  for (std::size_t i = 0, n; i < s.size(); i += n)
    if ((n = sqs_char(s, i)) == 0) return false;
  return true;
}

std::string sqs_text(const std::string& s) {
  if (valid_body(s)) return s;
  std::string out;
  for (std::size_t i = 0, n; i < s.size(); i += n) {
    n = sqs_char(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for the byte that starts no valid character
      n = 1;
    } else {
      out.append(s, i, n);
    }
  }
  return out;
}

bool wanted(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names) {
    if (n == "All" || n == ".*" || n == name) return true;
    if (n.size() > 2 && n.compare(n.size() - 2, 2, ".*") == 0 &&
        name.compare(0, n.size() - 1, n, 0, n.size() - 1) == 0)
      return true;
  }
  return false;
}

std::vector<std::string> names(const json& in, const char* key) {
  std::vector<std::string> out;
  if (has(in, key) && in[key].is_array())
    for (const auto& v : in[key]) out.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

std::string seconds(q::Millis ms) { return std::to_string(ms / 1000); }

std::string sequence_number(const std::string& id) {
  return fmt::format("{:020}", q::parse_message_id(id).value_or(0));
}

SqsError from_q(const q::Error& e, const std::string& queue) {
  switch (e.kind()) {
    case q::ErrorKind::NotFound: return no_such_queue(queue);
    case q::ErrorKind::Full: return SqsError(403, "OverLimit", "OverLimit", e.what());
    case q::ErrorKind::Busy:
      return SqsError(503, "ServiceUnavailable", "ServiceUnavailable", e.what(), false);
    case q::ErrorKind::Io:
    case q::ErrorKind::Permission:
    case q::ErrorKind::ReadOnly:
      return SqsError(500, "InternalError", "InternalError", e.what(), false);
    case q::ErrorKind::Stale:
    case q::ErrorKind::Usage:
    case q::ErrorKind::InvalidData: break;
  }
  return invalid_parameter(e.what());
}

}  // namespace serve
