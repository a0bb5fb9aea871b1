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

struct Context;

struct DestructiveFlags {
  bool dry_run = false;
  bool yes = false;
};

void add_destructive_flags(CLI::App* cmd, DestructiveFlags& flags);

// The flags of a command that empties or removes one queue (delete, purge,
// dlq purge).
struct EmptyQueueFlags {
  std::string queue;
  DestructiveFlags destructive;
};

// Asks "q: QUESTION [y/N] " on standard error and reads the answer from
// standard input; true for y or yes. Without a terminal, or with --yes, true
// at once. A refusal is reported by the caller (exit 1: nothing was done).
bool confirmed(const DestructiveFlags& flags, const std::string& question);

// What a destructive command is about to do, said three ways.
struct Destruction {
  std::string would;     // --dry-run: printed on standard output
  std::string question;  // asked on a terminal (see confirmed)
  std::string refused;   // on standard error when the answer is no
};

// The gate of a destructive command: true when it may go ahead. With
// --dry-run it prints `would` and returns false; when the answer is no it
// prints `refused` and sets exit status 1 (nothing was done).
bool may_destroy(const DestructiveFlags& flags, Context& ctx, const Destruction& what);

}  // namespace cli
