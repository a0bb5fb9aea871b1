// The `q work` runner: receives messages, runs a command per message, and acks,
// dead-letters or releases each by the command's exit status. One thread, one
// poll() loop: child stderr pipes, signals (through a self-pipe), and the queue
// file's change notifications.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "libq/broker.hpp"
#include "cli/work/worker_policy.hpp"

namespace cli {

struct WorkOptions {
  std::string queue;
  std::vector<std::string> command;
  std::string queue_file;  // exported to the command as Q_FILE
  unsigned concurrency = 1;
  q::Millis backoff_base = 1 * q::kSecond;
  q::Millis backoff_cap = 15 * q::kMinute;
  std::optional<q::Millis> timeout;       // per command
  q::Millis kill_after = 5 * q::kSecond;  // SIGTERM -> SIGKILL
  std::optional<q::Millis> visibility_timeout;
  double rate = 0;  // per process, starts per second
  std::string idempotency_attribute;
  std::optional<q::Millis> idempotency_window;  // default: the queue's retention
  q::Millis grace = 30 * q::kSecond;
  bool exit_when_empty = false;
  std::optional<std::uint64_t> max_messages;
  bool quiet = false;
  // --to DST: a stage; stdout of each successful run becomes messages on DST,
  // sent in the transaction that acks the source message.
  std::string to;
  bool to_lines = false;
  std::optional<std::uint64_t> to_max_bytes;  // default: DST's max message size
  q::Attributes to_attributes;
  std::optional<std::string> to_group;
  // --trip N/DUR: after N failures within DUR, pause the queue and stop.
  struct Trip {
    std::uint64_t failures = 0;
    q::Millis within = 0;
  };
  std::optional<Trip> trip;
};

// The least --visibility-timeout: the heartbeat extends a lease every third
// of it, and a lease that runs out between two heartbeats hands a running
// message to another consumer (or to this one again). A queue whose own
// visibility timeout is shorter is leased this long by q work, with a note.
constexpr q::Millis kMinWorkVisibility = 1 * q::kSecond;

// Exit status of `q work` when it ran and at least one message failed (was
// released for a retry or dead-lettered).
constexpr int kSomeFailed = 4;

// Exit status of `q work --trip` when it paused the queue (EX_TEMPFAIL).
constexpr int kTripped = 75;

// Runs until stopped (time from `clock`, the broker's) (signal, --exit-when-empty, --max-messages);
// returns the exit status. Throws q::Error for errors of the queue itself.
int run_worker(q::Broker& broker, const q::Clock& clock, const WorkOptions& options);

}  // namespace cli
