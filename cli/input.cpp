#include "input.hpp"

#include <unistd.h>

#include <cerrno>
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

q::Millis time_flag(const std::string& flag, const std::string& text) {
  auto t = q::parse_time(text);
  if (!t)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a time (like 2026-11-30T08:00:00Z or "
                               "@1790000000)",
                               flag, text));
  return *t;
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
