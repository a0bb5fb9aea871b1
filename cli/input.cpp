#include "input.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "error.hpp"
#include "timefmt.hpp"

namespace cli {

q::Millis duration_flag(const std::string& flag, const std::string& text) {
  auto d = q::parse_duration(text);
  if (!d)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a duration (like 500ms, 30s, 5m, 2h, 4d, or "
                               "seconds)",
                               flag, text));
  return *d;
}

std::optional<q::Millis> duration_flag(const std::string& flag,
                                       const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return duration_flag(flag, *text);
}

q::Millis time_flag(const std::string& flag, const std::string& text) {
  auto t = q::parse_time(text);
  if (!t)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a time (like 2026-11-30T08:00:00Z or "
                               "@1790000000)",
                               flag, text));
  return *t;
}

double rate_flag(const std::string& flag, const std::string& text) {
  auto bad = [&]() -> double {
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a rate (like 50/s, 3000/m, 10/h)", flag, text));
  };
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    return bad();
  }
  if (!(number >= 0) || std::isinf(number) || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
    return bad();
  std::string unit = text.substr(used);
  if (unit.empty() || unit == "/s") return number;
  if (unit == "/m") return number / 60;
  if (unit == "/h") return number / 3600;
  return bad();
}

std::pair<std::string, std::string> attribute_flag(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw q::Error(q::ErrorKind::InvalidData,
                   fmt::format("--attr '{}': expected KEY=VALUE", text));
  return {text.substr(0, eq), text.substr(eq + 1)};
}

std::string read_stdin() {
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw q::Error(q::ErrorKind::Io,
                     fmt::format("cannot read standard input: {}", std::strerror(errno)));
    }
    data.append(buf, static_cast<std::size_t>(n));
  }
  return data;
}

std::vector<std::string> split_records(const std::string& data, char separator) {
  std::vector<std::string> records;
  std::size_t start = 0;
  while (start < data.size()) {
    auto end = data.find(separator, start);
    if (end == std::string::npos) end = data.size();
    records.emplace_back(data, start, end - start);
    start = end + 1;
  }
  return records;
}

}  // namespace cli
