#include "cli/input.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/timefmt.hpp"

namespace cli {

q::Millis duration_flag(const std::string& flag, const std::string& text) {
  auto d = q::parse_duration(text);
  if (!d)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a duration (like 500ms, 1.5s, 30s, 5m, 2h, 4d, "
                               "1h30m, or seconds)",
                               flag, text));
  return *d;
}

std::optional<q::Millis> duration_flag(const std::string& flag,
                                       const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return duration_flag(flag, *text);
}

std::optional<q::Millis> parse_local_time(const std::string& text) {
  int year, month, day, hour, minute, second = 0, used = 0;
  char sep = 0;
  const char* c = text.c_str();
  bool with_seconds = std::sscanf(c, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &year, &month, &day, &sep, &hour,
                                  &minute, &second, &used) == 7 &&
                      static_cast<std::size_t>(used) == text.size();
  if (!with_seconds) {
    second = 0;
    used = 0;
    if (std::sscanf(c, "%4d-%2d-%2d%c%2d:%2d%n", &year, &month, &day, &sep, &hour, &minute,
                    &used) != 6 ||
        static_cast<std::size_t>(used) != text.size())
      return std::nullopt;
  }
  // Exactly the digits of the form: "YYYY-MM-DD HH:MM[:SS]".
  if (text.size() != (with_seconds ? 19u : 16u) || (sep != ' ' && sep != 'T') ||
      !std::isdigit(static_cast<unsigned char>(text[0])))
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;  // the zone's rule for that day
  std::tm given = tm;
  std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  // mktime rolls impossible fields over (Feb 30 is Mar 2): refuse them.
  if (tm.tm_year != given.tm_year || tm.tm_mon != given.tm_mon || tm.tm_mday != given.tm_mday ||
      tm.tm_min != given.tm_min || tm.tm_sec != given.tm_sec)
    return std::nullopt;
  return static_cast<q::Millis>(t) * q::kSecond;
}

q::Millis time_flag(const std::string& flag, const std::string& text) {
  auto t = q::parse_time(text);
  if (!t) t = parse_local_time(text);
  if (!t)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a time (like 2026-11-30T08:00:00Z, "
                               "2026-11-30T09:00:00+01:00, '2026-11-30 08:00' in local time, "
                               "or @1790000000)",
                               flag, text));
  return *t;
}

namespace {

// The length of a plain decimal number at the start of `text` ("12", "0.5",
// "1e-3"), 0 when there is none: no sign, hex, "inf" or "nan".
std::size_t decimal_length(const std::string& text) {
  std::size_t i = 0;
  auto digits = [&] {
    std::size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i > start;
  };
  if (!digits()) return 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digits()) return 0;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (!digits()) return 0;
  }
  return i;
}

}  // namespace

double rate_flag(const std::string& flag, const std::string& text) {
  auto bad = [&](const std::string& why) -> double {
    throw q::Error(q::ErrorKind::Usage, fmt::format("{} '{}': {}", flag, text, why));
  };
  std::size_t used = decimal_length(text);
  if (used == 0) return bad("not a rate (like 50/s, 3000/m, 10/h)");
  double number = std::strtod(text.substr(0, used).c_str(), nullptr);
  std::string unit = text.substr(used);
  double per_second = 0;
  if (unit.empty() || unit == "/s")
    per_second = number;
  else if (unit == "/m")
    per_second = number / 60;
  else if (unit == "/h")
    per_second = number / 3600;
  else
    return bad("not a rate (like 50/s, 3000/m, 10/h)");
  // Issue 17: 1e-300/s made an interval between starts that overflowed and was
  // ignored. 0 means no limit; anything else must be a start a year or more.
  if (per_second != 0 && !(per_second >= q::kMinRate))
    return bad("too slow: the interval between starts must be at most a year (0: no limit)");
  if (!(per_second <= q::kMaxRate))
    return bad(fmt::format("too fast: at most {:.0f} per second", q::kMaxRate));
  return per_second;
}

std::uint64_t count_flag(const std::string& flag, const std::string& text, std::uint64_t max) {
  bool digits =
      !text.empty() && text.size() <= 19 &&
      std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  std::uint64_t value = digits ? std::stoull(text) : 0;
  if (!digits || value > max)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a count from 0 to {}", flag, text, max));
  return value;
}

std::optional<std::uint64_t> parse_size(const std::string& text) {
  std::size_t used = decimal_length(text);
  if (used == 0 || text.find_first_of("eE") < used) return std::nullopt;
  std::string unit = text.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  // GNU's rule (coreutils' --block-size, dd): K, M, G and KiB, MiB, GiB are
  // powers of 1024; KB, MB, GB powers of 1000.
  static const std::pair<const char*, std::uint64_t> units[] = {{"", 1},
                                                                {"B", 1},
                                                                {"K", 1ULL << 10},
                                                                {"KIB", 1ULL << 10},
                                                                {"KB", 1000},
                                                                {"M", 1ULL << 20},
                                                                {"MIB", 1ULL << 20},
                                                                {"MB", 1000'000},
                                                                {"G", 1ULL << 30},
                                                                {"GIB", 1ULL << 30},
                                                                {"GB", 1000'000'000}};
  std::uint64_t scale = 0;
  for (const auto& [name, bytes] : units)
    if (unit == name) scale = bytes;
  if (scale == 0) return std::nullopt;
  std::string number = text.substr(0, used);
  auto dot = number.find('.');
  std::string whole = number.substr(0, dot);
  std::string fraction = dot == std::string::npos ? "" : number.substr(dot + 1);
  if (whole.size() > 12 || fraction.size() > 9) return std::nullopt;
  std::uint64_t denominator = 1, numerator = 0;
  for (char c : fraction) {
    numerator = numerator * 10 + static_cast<std::uint64_t>(c - '0');
    denominator *= 10;
  }
  std::uint64_t bytes = std::stoull(whole) * scale;
  if (numerator * scale % denominator != 0) return std::nullopt;  // not whole bytes
  return bytes + numerator * scale / denominator;
}

std::uint64_t size_flag(const std::string& flag, const std::string& text, std::uint64_t max) {
  auto bytes = parse_size(text);
  if (!bytes)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("{} '{}': not a size (bytes, or with a unit: 10K, 10M, 1G are "
                               "binary like 10KiB, 10MiB, 1GiB; 10KB, 10MB, 1GB decimal)",
                               flag, text));
  if (*bytes > max)
    throw q::Error(
        q::ErrorKind::Usage,
        fmt::format("{} '{}': {} bytes, over the most allowed, {} bytes", flag, text, *bytes, max));
  return *bytes;
}

std::pair<std::string, std::string> attribute_flag(const std::string& text,
                                                   const std::string& flag) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw q::Error(q::ErrorKind::InvalidData,
                   fmt::format("{} '{}': expected KEY=VALUE", flag, text));
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

RecordReader::RecordReader(int fd, char separator, std::size_t max_records, std::size_t max_bytes)
    : fd_(fd),
      separator_(separator),
      max_records_(max_records),
      max_bytes_(max_bytes),
      max_record_(kMaxRecord),
      limit_what_("the largest max size a queue can have") {
  // A bigger pipe lets the producer go on writing while a batch commits.
  // Unprivileged processes may ask for up to /proc/sys/fs/pipe-max-size; a
  // refusal (or a file, a terminal) changes nothing.
  (void)::fcntl(fd_, F_SETPIPE_SZ, 1 << 20);
}

bool RecordReader::fill(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  for (;;) {
    int ready = ::poll(&p, 1, timeout_ms);
    if (ready > 0) break;
    if (ready == 0) return false;
    if (errno != EINTR)
      throw q::Error(q::ErrorKind::Io,
                     fmt::format("cannot read standard input: {}", std::strerror(errno)));
  }
  // Readable, hung up or invalid: read() says which.
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw q::Error(q::ErrorKind::Io,
                     fmt::format("cannot read standard input: {}", std::strerror(errno)));
    if (n == 0) eof_ = true;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
}

std::vector<std::string> RecordReader::next_batch() {
  // What was returned last time is gone: keep only the unreturned rest.
  if (start_ > 0) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  std::vector<std::string> batch;
  std::size_t bytes = 0, read_before = buffer_.size();
  for (;;) {
    while (batch.size() < max_records_ && bytes < max_bytes_) {
      auto* from = buffer_.data() + start_ + scanned_;
      auto* end = static_cast<const char*>(
          std::memchr(from, separator_, buffer_.size() - start_ - scanned_));
      if (!end) {
        scanned_ = buffer_.size() - start_;
        break;
      }
      auto length = static_cast<std::size_t>(end - (buffer_.data() + start_));
      batch.emplace_back(buffer_, start_, length);
      bytes += length;
      start_ += length + 1;
      scanned_ = 0;
    }
    if (batch.size() >= max_records_ || bytes >= max_bytes_) break;
    if (scanned_ > max_record_)
      throw q::Error(q::ErrorKind::InvalidData,
                     fmt::format("standard input: {} {} is over {} bytes, {}",
                                 separator_ == '\n' ? "line" : "record",
                                 records_ + batch.size() + 1, max_record_, limit_what_));
    if (eof_) {
      if (start_ < buffer_.size()) {
        batch.emplace_back(buffer_, start_, buffer_.size() - start_);
        start_ = buffer_.size();
        scanned_ = 0;
      }
      break;
    }
    // Nothing yet: wait for input. Something: take only what is readable
    // now, lingering a little while a fast producer fills each read.
    int timeout = -1;
    if (!batch.empty()) timeout = buffer_.size() - read_before >= (1 << 16) ? 1 : 0;
    if (!fill(timeout)) break;
  }
  records_ += batch.size();
  return batch;
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
