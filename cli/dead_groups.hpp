// `q dlq list --by-reason | --by exit|reason|attr:KEY`: which dead letters
// failed the same way.
#pragma once

#include <string>
#include <string_view>

#include "broker.hpp"

namespace cli {

// A line with what differs between runs masked, so failures of one kind
// group together: hex runs (0x7f3a, deadbeef00, UUIDs) and message ids become
// "#", and so do numbers. "timeout after 1503 ms on 10.0.0.7" reads
// "timeout after # ms on #.#.#.#".
std::string mask_variable(std::string_view line);

struct GroupBy {
  enum Kind { Reason, Exit, Attribute } kind = Reason;
  std::string attribute;  // Attribute: its key
};
// "reason", "exit" or "attr:KEY"; throws q::Error(Usage) naming --by.
GroupBy parse_group_by(const std::string& text);

// The group of a dead letter: by reason, the exit status and the masked
// first stderr line a q work run stored (else the masked first line of the
// reason); by exit, "exit status N" (or "-" when no command's exit is known);
// by attribute, its value ("-" without it).
std::string group_key(const q::Message& m, const GroupBy& by);

}  // namespace cli
