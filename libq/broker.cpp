#include "broker.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "error.hpp"
#include "timefmt.hpp"
#include "utf8.hpp"

namespace q {

void validate(const QueueConfig& c) {
  auto bad = [](const std::string& what) { throw Error(ErrorKind::Usage, what); };
  if (c.visibility_timeout < 0 || c.visibility_timeout > kMaxVisibilityTimeout)
    bad(fmt::format("--visibility-timeout {}: must be between 0s and 12h",
                    format_duration(c.visibility_timeout)));
  if (c.max_receives > kMaxMaxReceives)
    bad(fmt::format("--max-receives {}: must be between 1 and {} (or 0: never dead-letter)",
                    c.max_receives, kMaxMaxReceives));
  if (c.retention < kMinute || c.retention > 365 * kDay)
    bad(fmt::format("--retention {}: must be between 1m and 365d", format_duration(c.retention)));
  if (c.delay < 0 || c.delay > kMaxDelay)
    bad(fmt::format("--delay {}: must be between 0s and 12h", format_duration(c.delay)));
  if (c.max_depth > kMaxMaxDepth)
    bad(fmt::format("--max-depth {}: must be between 0 (unlimited) and {}", c.max_depth,
                    kMaxMaxDepth));
  if (c.max_size < 1 || c.max_size > kMaxMaxSize)
    bad(fmt::format("--max-size {}: must be between 1 and {} bytes", c.max_size, kMaxMaxSize));
  if (c.content_dedup && !c.fifo) bad("--content-dedup: only FIFO queues (--fifo) have it");
  if (!(c.rate == 0 || (c.rate >= kMinRate && c.rate <= kMaxRate)))
    bad(fmt::format("--rate {}/s: must be 0 (no limit) or between one a year and {:.0f} per "
                    "second",
                    c.rate, kMaxRate));
  if (c.dedup_window < 0 || c.dedup_window > 7 * kDay)
    bad(fmt::format("--dedup-window {}: must be between 0s and 7d",
                    format_duration(c.dedup_window)));
}

QueueConfig apply(QueueConfig c, const ConfigChange& change) {
  if (change.visibility_timeout) c.visibility_timeout = *change.visibility_timeout;
  if (change.max_receives) c.max_receives = *change.max_receives;
  if (change.retention) c.retention = *change.retention;
  if (change.delay) c.delay = *change.delay;
  if (change.max_depth) c.max_depth = *change.max_depth;
  if (change.max_size) c.max_size = *change.max_size;
  if (change.dedup_window) c.dedup_window = *change.dedup_window;
  if (change.rate) c.rate = *change.rate;
  if (change.fifo) c.fifo = *change.fifo;
  if (change.content_dedup) c.content_dedup = *change.content_dedup;
  return c;
}

void check_agrees(const std::string& queue, const QueueConfig& have,
                  const ConfigChange& change) {
  auto differs = [&](const char* flag, auto want, auto is, auto show) {
    if (want && *want != is)
      throw Error(ErrorKind::Usage,
                  fmt::format("queue {}: already exists with {} {}; change it with 'q config {} "
                              "{} {}'",
                              queue, flag, show(is), queue, flag, show(*want)));
  };
  auto dur = [](Millis v) { return format_duration(v); };
  auto num = [](auto v) { return fmt::format("{}", v); };
  differs("--visibility-timeout", change.visibility_timeout, have.visibility_timeout, dur);
  differs("--max-receives", change.max_receives, have.max_receives, num);
  differs("--retention", change.retention, have.retention, dur);
  differs("--delay", change.delay, have.delay, dur);
  differs("--max-depth", change.max_depth, have.max_depth, num);
  differs("--max-size", change.max_size, have.max_size, num);
  differs("--dedup-window", change.dedup_window, have.dedup_window, dur);
  differs("--rate", change.rate, have.rate, [](double v) { return fmt::format("{}/s", v); });
  if (change.fifo && *change.fifo != have.fifo)
    throw Error(ErrorKind::Usage,
                fmt::format("queue {}: already exists as a {} queue, and a queue's kind cannot "
                            "change",
                            queue, have.fifo ? "FIFO" : "standard"));
  auto flag = [](bool v) { return v ? "on" : "off"; };
  differs("--content-dedup", change.content_dedup, have.content_dedup, flag);
}

bool is_valid_queue_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxQueueName) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
  });
}

void check_new_queue_name(const std::string& name) {
  auto bad = [&](const char* why) {
    throw Error(ErrorKind::Usage, fmt::format("queue name '{}': {}", name, why));
  };
  if (name == "." || name == "..") bad("'.' and '..' read as directories; choose another name");
  if (!name.empty() && name[0] == '-')
    bad("a name starting with '-' reads as an option; start with a letter, digit, '_' or '.'");
}

void check_attributes(const std::string& queue, const Attributes& attributes) {
  auto bad = [&](const std::string& why) {
    throw Error(ErrorKind::InvalidData, fmt::format("queue {}: {}", queue, why));
  };
  if (attributes.size() > kMaxAttributes)
    bad(fmt::format("{}, at most {}", plural(attributes.size(), "attribute"), kMaxAttributes));
  std::set<std::string_view> seen;
  for (const auto& [key, value] : attributes) {
    if (key.empty() || key.size() > kMaxAttributeKey)
      bad(fmt::format("attribute key '{}': must be 1 to {} bytes", key, kMaxAttributeKey));
    if (!is_utf8(key)) bad(fmt::format("attribute key '{}': not UTF-8 text", key));
    if (!is_utf8(value))
      bad(fmt::format("attribute {}: the value is not UTF-8 text (put binary data in the body)",
                      key));
    if (!seen.insert(key).second) bad(fmt::format("attribute {}: given twice", key));
  }
}

Attributes last_value_wins(Attributes attributes) {
  Attributes out;
  std::map<std::string, std::size_t> index;
  for (auto& [key, value] : attributes) {
    auto [at, fresh] = index.emplace(key, out.size());
    if (fresh) out.emplace_back(std::move(key), std::move(value));
    else out[at->second].second = std::move(value);
  }
  return out;
}

std::string plural(std::uint64_t n, const std::string& noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

const char* to_string(MessageState state) {
  switch (state) {
    case MessageState::Visible: return "visible";
    case MessageState::InFlight: return "in_flight";
    case MessageState::Delayed: return "delayed";
    case MessageState::Dead: return "dead";
  }
  return "unknown";
}

Millis backoff_delay(Millis base, Millis cap, std::uint32_t receive_count, double unit) {
  if (base <= 0 || cap <= 0) return 0;
  std::uint32_t exponent = receive_count == 0 ? 0 : std::min<std::uint32_t>(receive_count - 1, 40);
  double ceiling = std::min(static_cast<double>(cap), std::ldexp(static_cast<double>(base), exponent));
  unit = std::clamp(unit, 0.0, 1.0);
  return static_cast<Millis>(std::floor(ceiling * unit));
}

}  // namespace q
