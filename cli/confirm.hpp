// Destructive commands (purge, dlq purge, delete, dlq delete) ask before they
// act when a person is at a terminal: standard input and standard error are
// both terminals and -y/--yes was not given. On a pipe, from cron or a
// service (no terminal), they act without asking, as before.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace cli {

struct DestructiveFlags {
  bool dry_run = false;
  bool yes = false;
};

void add_destructive_flags(CLI::App* cmd, DestructiveFlags& flags);

// Asks "q: QUESTION [y/N] " on standard error and reads the answer from
// standard input; true for y or yes. Without a terminal, or with --yes, true
// at once. A refusal is reported by the caller (exit 1: nothing was done).
bool confirmed(const DestructiveFlags& flags, const std::string& question);

}  // namespace cli
