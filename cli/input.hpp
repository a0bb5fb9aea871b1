// Parsing what users type: durations, times, attributes, and reading stdin.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "broker.hpp"

namespace cli {

// Throw q::Error(Usage) naming `flag` when `text` is malformed.
q::Millis duration_flag(const std::string& flag, const std::string& text);
q::Millis time_flag(const std::string& flag, const std::string& text);
// For optional flags: nullopt when the flag was not given; an empty value given
// is malformed like any other.
std::optional<q::Millis> duration_flag(const std::string& flag,
                                       const std::optional<std::string>& text);

// "50/s", "3000/m", "10/h", or a bare number per second; in messages per second.
double rate_flag(const std::string& flag, const std::string& text);

// A count of digits only, at most `max`: CLI11 reads "-1" into an unsigned
// 64-bit option as 2^64-1 (issue 12 break 13).
std::uint64_t count_flag(const std::string& flag, const std::string& text, std::uint64_t max);

// KEY=VALUE; throws q::Error(InvalidData) naming the flag when malformed.
std::pair<std::string, std::string> attribute_flag(const std::string& text);

// Reads all of standard input, binary-safe. Throws q::Error(Io) on failure.
std::string read_stdin();

// Splits on `separator`; a final unterminated record counts, a final separator
// does not start an empty one.
std::vector<std::string> split_records(const std::string& data, char separator);

}  // namespace cli
