#include "libq/timefmt.hpp"

#include <cctype>
#include <cstdint>
#include <ctime>

#include <fmt/format.h>

namespace q {
namespace {

bool read_number(std::string_view& s, std::int64_t& out, int max_digits = 15) {
  std::size_t i = 0;
  std::int64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (static_cast<int>(i) >= max_digits) return false;
    v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  out = v;
  s.remove_prefix(i);
  return true;
}

bool read_fixed(std::string_view& s, int digits, int& out) {
  if (s.size() < static_cast<std::size_t>(digits)) return false;
  int v = 0;
  for (int i = 0; i < digits; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  s.remove_prefix(digits);
  return true;
}

bool is_leap_year(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in_month(int year, int month) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap_year(year) ? 29 : kDays[month - 1];
}

bool read_char(std::string_view& s, char c) {
  if (s.empty() || std::toupper(static_cast<unsigned char>(s[0])) != c) return false;
  s.remove_prefix(1);
  return true;
}

}  // namespace

namespace {

// The unit a duration's number has: "ms", "s", "sec", "seconds", "m", "min",
// "h", "hours", "d", "days", ...; 0 for none known.
Millis duration_unit(std::string_view word) {
  struct Name {
    const char* name;
    Millis unit;
  };
  static const Name names[] = {
      {"ms", 1},           {"msec", 1},          {"msecs", 1},         {"millisecond", 1},
      {"milliseconds", 1}, {"s", kSecond},       {"sec", kSecond},     {"secs", kSecond},
      {"second", kSecond}, {"seconds", kSecond}, {"m", kMinute},       {"min", kMinute},
      {"mins", kMinute},   {"minute", kMinute},  {"minutes", kMinute}, {"h", kHour},
      {"hr", kHour},       {"hrs", kHour},       {"hour", kHour},      {"hours", kHour},
      {"d", kDay},         {"day", kDay},        {"days", kDay}};
  for (const auto& n : names)
    if (word == n.name) return n.unit;
  return 0;
}

}  // namespace

std::optional<Millis> parse_duration(std::string_view s) {
  if (s.empty()) return std::nullopt;
  constexpr std::int64_t kLimit = std::int64_t{1} << 53;  // exact in a double, far past any use
  Millis total = 0;
  // Units must come largest first and once each ("1h30m"): "1h1h" or "30m1h"
  // is more likely a typo than a sum.
  Millis previous_unit = INT64_MAX;
  std::string_view rest = s;
  bool first = true;
  while (!rest.empty()) {
    std::int64_t whole = 0;
    if (!read_number(rest, whole)) return std::nullopt;
    // A fraction ("1.5s", "0.25h"): it must come to whole milliseconds.
    std::int64_t fraction = 0, scale = 1;
    if (!rest.empty() && rest[0] == '.') {
      rest.remove_prefix(1);
      while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0]))) {
        if (scale >= 1'000'000'000) return std::nullopt;
        fraction = fraction * 10 + (rest[0] - '0');
        scale *= 10;
        rest.remove_prefix(1);
      }
      if (scale == 1) return std::nullopt;
    }
    Millis unit;
    if (rest.empty() && first) {
      unit = kSecond;  // bare seconds
    } else {
      std::size_t n = 0;
      while (n < rest.size() && std::isalpha(static_cast<unsigned char>(rest[n]))) ++n;
      unit = duration_unit(rest.substr(0, n));
      if (unit == 0) return std::nullopt;
      rest.remove_prefix(n);
    }
    if (unit >= previous_unit) return std::nullopt;
    previous_unit = unit;
    if (whole > kLimit / unit) return std::nullopt;
    if (fraction * unit % scale != 0) return std::nullopt;
    Millis part = whole * unit + fraction * unit / scale;
    if (total > kLimit - part) return std::nullopt;
    total += part;
    first = false;
  }
  return total;
}

std::string format_duration(Millis d) {
  if (d == 0) return "0s";
  const char* sign = d < 0 ? "-" : "";
  if (d < 0) d = -d;
  struct Unit {
    Millis size;
    const char* name;
  };
  for (Unit u : {Unit{kDay, "d"}, Unit{kHour, "h"}, Unit{kMinute, "m"}, Unit{kSecond, "s"}})
    if (d % u.size == 0) return fmt::format("{}{}{}", sign, d / u.size, u.name);
  return fmt::format("{}{}ms", sign, d);
}

std::optional<Millis> parse_time(std::string_view s) {
  if (!s.empty() && s[0] == '@') {
    s.remove_prefix(1);
    std::int64_t seconds = 0;
    if (!read_number(s, seconds, 12) || !s.empty()) return std::nullopt;
    return seconds * kSecond;
  }
  int year, month, day, hour, minute, second;
  if (!read_fixed(s, 4, year) || !read_char(s, '-') || !read_fixed(s, 2, month) ||
      !read_char(s, '-') || !read_fixed(s, 2, day) || !(read_char(s, 'T') || read_char(s, ' ')) ||
      !read_fixed(s, 2, hour) || !read_char(s, ':') || !read_fixed(s, 2, minute) ||
      !read_char(s, ':') || !read_fixed(s, 2, second))
    return std::nullopt;
  // timegm rolls impossible fields over (Feb 30 is Mar 2): refuse them here.
  if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
      minute > 59 || second > 60)
    return std::nullopt;
  Millis fraction = 0;
  if (!s.empty() && s[0] == '.') {
    s.remove_prefix(1);
    int digits = 0;
    Millis scale = 100;
    while (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) {
      fraction += (s[0] - '0') * scale;
      scale /= 10;
      s.remove_prefix(1);
      ++digits;
    }
    if (digits == 0) return std::nullopt;
  }
  Millis offset = 0;
  if (read_char(s, 'Z')) {
  } else if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    int sign = s[0] == '-' ? -1 : 1;
    s.remove_prefix(1);
    int oh, om;
    if (!read_fixed(s, 2, oh) || !read_char(s, ':') || !read_fixed(s, 2, om)) return std::nullopt;
    if (oh > 23 || om > 59) return std::nullopt;  // RFC 3339: 00-23 and 00-59
    offset = sign * (oh * kHour + om * kMinute);
  } else {
    return std::nullopt;
  }
  if (!s.empty()) return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  std::time_t t = timegm(&tm);
  return static_cast<Millis>(t) * kSecond + fraction - offset;
}

std::string format_time(Millis instant) {
  std::time_t seconds = static_cast<std::time_t>(instant / 1000);
  Millis ms = instant % 1000;
  if (ms < 0) {
    ms += 1000;
    --seconds;
  }
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

}  // namespace q
