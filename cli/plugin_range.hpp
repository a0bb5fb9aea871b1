// A threshold in the monitoring-plugins range syntax (`q check -w/-c`), as the
// Monitoring Plugins Development Guidelines define it:
//   10      alert outside 0..10 (below 0 or above 10)
//   10:     alert below 10
//   ~:10    alert above 10 (no lower end)
//   10:20   alert outside 10..20
//   @10:20  alert inside 10..20 (ends included)
#pragma once

#include <optional>
#include <string>

namespace cli {

struct PluginRange {
  std::optional<double> start;  // none: ~ (no lower end)
  std::optional<double> end;    // none: no upper end
  bool inside = false;          // '@': alert inside the range
  std::string text;             // as given, for perfdata and messages

  // True when VALUE raises the alert.
  bool alerts(double value) const;
};

// FLAG names the option in the error (q::Error, Usage) for a bad range.
PluginRange parse_plugin_range(const std::string& flag, const std::string& text);

}  // namespace cli
