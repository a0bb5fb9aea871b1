// `q dlq list --by-reason | --by exit|reason|attr:KEY`: which dead letters
// failed the same way.
#pragma once

#include <string>
#include <string_view>

#include "libq/broker.hpp"

namespace cli {

// A line with what differs between runs masked, so failures of one cause
// group together and two causes stay apart: status codes are kept (three
// digits 100-599 first on the line or after smtp/http/status/code/error/...,
// an exit status after "status" or "exit", enhanced codes such as 4.2.0);
// other numbers, message ids, hex runs and paths become "#".
// "timeout after 1503 ms on 10.0.0.7" reads "timeout after # ms on #.#.#.#";
// "smtp 451 4.2.0 busy" stays as it is. q-dlq(1) says the rule.
std::string mask_variable(std::string_view line);

struct GroupBy {
  enum Kind { Reason, Exit, Attribute } kind = Reason;
  std::string attribute;  // Attribute: its key
};
// "reason", "exit" or "attr:KEY"; throws q::Error(Usage) naming --by.
GroupBy parse_group_by(const std::string& text);

// The group of a dead letter: by reason, the exit status and the masked
// first and last stderr lines a q work run stored ("exit status 1: FIRST ...
// LAST", one line when they are the same; else the masked first line of the
// reason); by exit, "exit status N" (or "-" when no command's exit is known);
// by attribute, its value ("-" without it).
std::string group_key(const q::Message& m, const GroupBy& by);

}  // namespace cli
