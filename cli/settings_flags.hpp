// The settings flags q create and q config share.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "libq/broker.hpp"
#include "cli/input.hpp"

namespace cli {

struct SettingsFlags {
  std::string queue;
  std::optional<std::string> visibility_timeout, retention, delay, dedup_window, rate;
  std::optional<std::uint32_t> max_receives;
  std::optional<std::string> max_depth, max_size;
  bool fifo = false;
  bool standard = false;  // config: --fifo/--standard are checked against the queue
  std::optional<bool> content_dedup;
  bool json = false;

  q::ConfigChange change() const {
    q::ConfigChange c;
    c.visibility_timeout = duration_flag("--visibility-timeout", visibility_timeout);
    c.retention = duration_flag("--retention", retention);
    c.delay = duration_flag("--delay", delay);
    c.dedup_window = duration_flag("--dedup-window", dedup_window);
    if (rate) c.rate = rate_flag("--rate", *rate);
    if (fifo) c.fifo = true;
    if (standard) c.fifo = false;
    if (content_dedup) c.content_dedup = *content_dedup;
    c.max_receives = max_receives;
    if (max_size)
      c.max_size = static_cast<std::uint32_t>(size_flag("--max-size", *max_size, q::kMaxMaxSize));
    if (max_depth) c.max_depth = count_flag("--max-depth", *max_depth, q::kMaxMaxDepth);
    return c;
  }
};

void add_settings(CLI::App* cmd, SettingsFlags& f);
// The settings as q config prints them: a table, or one JSON object.
std::string settings_text(const std::string& queue, const q::QueueConfig& c, bool json);

}  // namespace cli
