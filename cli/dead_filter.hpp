// The filters `q dlq list` and `q redrive` share: --reason REGEX, --since DUR.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace CLI {
class App;
}

namespace cli {

struct DeadFilterFlags {
  std::optional<std::string> reason;  // ECMAScript regex, searched in the reason
  std::optional<std::string> since;   // dead-lettered within this long
};

void add_dead_filter_flags(CLI::App* cmd, DeadFilterFlags& flags);

class DeadFilter {
 public:
  explicit DeadFilter(const DeadFilterFlags& flags);  // throws q::Error(Usage) on a bad regex
  bool active() const { return reason_.has_value() || since_.has_value(); }
  bool matches(const q::Message& m, q::Millis now) const;

 private:
  std::optional<std::regex> reason_;
  std::optional<q::Millis> since_;
};

}  // namespace cli
