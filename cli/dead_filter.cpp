#include "cli/dead_filter.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "libq/error.hpp"
#include "cli/input.hpp"

namespace cli {

void add_dead_filter_flags(CLI::App* cmd, DeadFilterFlags& flags) {
  cmd->add_option("--reason", flags.reason,
                  "Only dead letters whose reason matches REGEX (ECMAScript, searched)")
      ->type_name("REGEX");
  cmd->add_option("--since", flags.since, "Only those dead-lettered within DUR")->type_name("DUR");
}

DeadFilter::DeadFilter(const DeadFilterFlags& flags) {
  if (flags.reason) {
    try {
      reason_.emplace(*flags.reason, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw q::Error(
          q::ErrorKind::Usage,
          fmt::format("--reason '{}': not a regular expression ({})", *flags.reason, e.what()));
    }
  }
  since_ = duration_flag("--since", flags.since);
}

bool DeadFilter::matches(const q::Message& m, q::Millis now) const {
  if (since_ && m.dead_at.value_or(0) < now - *since_) return false;
  if (reason_ && !std::regex_search(m.reason, *reason_)) return false;
  return true;
}

}  // namespace cli
