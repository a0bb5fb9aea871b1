// The text forms of durations and instants that users type and read.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "libq/clock.hpp"

namespace q {

// "500ms", "30s", "5m", "2h", "4d", or a bare number of seconds; combinations
// such as "1h30m" too (largest unit first, each unit once); fractions that
// come to whole milliseconds ("1.5s", "0.5"); the units' longer names too
// ("30sec", "2hours", "1min"; no spaces). nullopt when malformed or negative.
std::optional<Millis> parse_duration(std::string_view text);
// The shortest exact spelling: 1500 -> "1500ms", 90000 -> "90s", 300000 -> "5m".
std::string format_duration(Millis duration);
// RFC 3339 ("2026-11-30T08:00:00Z", fractions and offsets allowed) or "@UNIX_SECONDS".
std::optional<Millis> parse_time(std::string_view text);
// RFC 3339 UTC with milliseconds: "2026-11-30T08:00:00.000Z".
std::string format_time(Millis instant);

}  // namespace q
