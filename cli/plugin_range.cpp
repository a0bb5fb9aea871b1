#include "cli/plugin_range.hpp"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "libq/error.hpp"

namespace cli {

bool PluginRange::alerts(double value) const {
  bool within = (!start || value >= *start) && (!end || value <= *end);
  return inside ? within : !within;
}

namespace {

std::optional<double> number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* stop = nullptr;
  double v = std::strtod(text.c_str(), &stop);
  if (stop != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

PluginRange parse_plugin_range(const std::string& flag, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return q::Error(
        q::ErrorKind::Usage,
        fmt::format("{} '{}': {} (ranges are N, N:, ~:N, N:M or @N:M)", flag, text, why));
  };
  PluginRange r;
  r.text = text;
  std::string rest = text;
  if (!rest.empty() && rest.front() == '@') {
    r.inside = true;
    rest.erase(0, 1);
  }
  auto colon = rest.find(':');
  if (colon == std::string::npos) {
    // "N": 0..N.
    r.start = 0;
    r.end = number(rest);
    if (!r.end) throw bad("not a number");
  } else {
    std::string lo = rest.substr(0, colon), hi = rest.substr(colon + 1);
    if (lo == "~") {
      r.start = std::nullopt;
    } else if (lo.empty()) {
      r.start = 0;
    } else {
      r.start = number(lo);
      if (!r.start) throw bad("the start is not a number or ~");
    }
    if (!hi.empty()) {
      r.end = number(hi);
      if (!r.end) throw bad("the end is not a number");
    }
  }
  if (r.start && r.end && *r.start > *r.end) throw bad("the start is above the end");
  if (!r.start && !r.end) throw bad("no end at all");
  return r;
}

}  // namespace cli
