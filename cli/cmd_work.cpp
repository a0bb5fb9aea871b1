// q work QUEUE [options] -- COMMAND [ARGS...]: the consumer runner.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "libq/location.hpp"
#include "cli/work/worker.hpp"

#include <fmt/format.h>

#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct WorkFlags {
  std::string queue;
  std::vector<std::string> command;
  unsigned concurrency = 1;
  std::string backoff_base = "1s", backoff_cap = "15m", grace = "30s", kill_after = "5s";
  std::optional<std::string> timeout, visibility_timeout, rate, idempotency_window, trip;
  std::string idempotency_key;
  std::optional<std::uint64_t> max_messages;
  bool exit_when_empty = false, quiet = false;
  std::string to;
  bool to_lines = false;
  std::optional<std::uint64_t> to_max_bytes;
  std::vector<std::string> to_attributes;
  std::optional<std::string> to_group;
};

q::Error bad_flag(const std::string& text) { return q::Error(q::ErrorKind::Usage, text); }

// Every flag is checked here, before the queue file is opened: a value that
// would fail only at the first message (hours later, under a service manager
// that then leaves the unit down) is refused at once.
void validate(const WorkOptions& o) {
  if (o.timeout && *o.timeout <= 0)
    throw bad_flag("--timeout 0s: must be more than 0 (leave it out for no time limit)");
  if (o.visibility_timeout && (*o.visibility_timeout < kMinWorkVisibility ||
                               *o.visibility_timeout > q::kMaxVisibilityTimeout))
    throw bad_flag(fmt::format(
        "--visibility-timeout {}: must be between {} (the heartbeat extends the lease every "
        "third of it) and 12h",
        q::format_duration(*o.visibility_timeout), q::format_duration(kMinWorkVisibility)));
  if (o.idempotency_window &&
      (*o.idempotency_window < q::kSecond || *o.idempotency_window > 365 * 24 * q::kHour))
    throw bad_flag(fmt::format("--idempotency-window {}: must be between 1s and 365d",
                               q::format_duration(*o.idempotency_window)));
  if (o.max_messages && *o.max_messages == 0)
    throw bad_flag("--max-messages 0: must be at least 1");
}

// --trip N/DUR: N failures within DUR.
WorkOptions::Trip trip_flag(const std::string& text) {
  auto slash = text.find('/');
  auto bad = [&](const std::string& why) {
    return bad_flag(
        fmt::format("--trip '{}': {} (like 5/1m: 5 failures within a minute)", text, why));
  };
  if (slash == std::string::npos) throw bad("expected N/DUR");
  std::string count = text.substr(0, slash);
  if (count.empty() || count.size() > 6 ||
      count.find_first_not_of("0123456789") != std::string::npos)
    throw bad("N must be a whole number from 1 to 999999");
  WorkOptions::Trip trip;
  trip.failures = std::stoull(count);
  if (trip.failures == 0) throw bad("N must be at least 1");
  trip.within = duration_flag("--trip", text.substr(slash + 1));
  if (trip.within <= 0) throw bad("DUR must be above 0");
  return trip;
}

void run_work(const WorkFlags& f, Context& ctx) {
  WorkOptions o;
  o.queue = f.queue;
  o.command = f.command;
  // The handlers' Q_FILE: never a password (the credentials are in the
  // environment: cli/nats_handoff.cpp moved a location's there).
  o.queue_file = q::split_user_info(ctx.queue_file()).rest;
  o.concurrency = f.concurrency;
  o.backoff_base = duration_flag("--backoff-base", f.backoff_base);
  o.backoff_cap = duration_flag("--backoff-cap", f.backoff_cap);
  o.timeout = duration_flag("--timeout", f.timeout);
  o.kill_after = duration_flag("--kill-after", f.kill_after);
  o.visibility_timeout = duration_flag("--visibility-timeout", f.visibility_timeout);
  if (f.rate) o.rate = rate_flag("--rate", *f.rate);
  o.idempotency_attribute = f.idempotency_key;
  o.idempotency_window = duration_flag("--idempotency-window", f.idempotency_window);
  o.grace = duration_flag("--grace", f.grace);
  o.exit_when_empty = f.exit_when_empty;
  o.max_messages = f.max_messages;
  o.quiet = f.quiet;
  o.to = f.to;
  o.to_lines = f.to_lines;
  o.to_max_bytes = f.to_max_bytes;
  for (const auto& a : f.to_attributes) o.to_attributes.push_back(attribute_flag(a, "--to-attr"));
  o.to_group = f.to_group;
  if (o.to.empty() && (o.to_lines || o.to_max_bytes || !o.to_attributes.empty() || o.to_group))
    throw bad_flag("--to-lines, --to-max-bytes, --to-attr and --to-group need --to DST");
  if (f.trip) o.trip = trip_flag(*f.trip);
  validate(o);
  auto broker = ctx.open();
  ctx.exit = run_worker(*broker, ctx.clock(), o);
}

}  // namespace

void add_work(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<WorkFlags>();
  if (!ctx.wants("work")) return;
  auto* cmd = app.add_subcommand(
      "work",
      "Run COMMAND once per message (body on stdin, Q_* variables in its environment): exit "
      "0 acks, 65 dead-letters at once, anything else retries with backoff. Exit 4 when any "
      "message failed");
  cmd->add_option("QUEUE", f->queue, "Queue to consume")->required();
  cmd->add_option("COMMAND", f->command, "Command and arguments, after '--'; no shell")->required();
  cmd->add_option("-j,--concurrency", f->concurrency, "Run up to N commands at once (default 1)")
      ->type_name("N")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--timeout", f->timeout,
                  "SIGTERM a command still running DUR after its start (SIGKILL after "
                  "--kill-after); counts as a failure")
      ->type_name("DUR");
  cmd->add_option("--kill-after", f->kill_after,
                  "SIGKILL this long after the SIGTERM of a "
                  "timeout or a stop (default 5s)")
      ->type_name("DUR");
  cmd->add_option("--backoff-base", f->backoff_base, "First retry delay ceiling (default 1s)")
      ->type_name("DUR");
  cmd->add_option("--backoff-cap", f->backoff_cap, "Largest retry delay (default 15m)")
      ->type_name("DUR");
  cmd->add_option("--visibility-timeout", f->visibility_timeout,
                  "Lease length, 1s to 12h, renewed by a heartbeat every third of it (default: "
                  "the queue's visibility timeout)")
      ->type_name("DUR");
  cmd->add_option("--rate", f->rate,
                  "Start at most this many commands per second in this process (the queue's "
                  "--rate limits all consumers together)")
      ->type_name("N/s");
  cmd->add_option("--idempotency-key", f->idempotency_key,
                  "Skip (ack without running) a message whose attribute ATTR, or else dedup id, "
                  "matches one already done")
      ->type_name("ATTR");
  cmd->add_option("--idempotency-window", f->idempotency_window,
                  "How long a done key is remembered (default: the queue's retention)")
      ->type_name("DUR");
  cmd->add_option("--grace", f->grace,
                  "On SIGTERM/SIGINT, let running commands finish this long, then stop them "
                  "and release each message once its command has exited (default 30s)")
      ->type_name("DUR");
  cmd->add_flag("--exit-when-empty", f->exit_when_empty,
                "Exit once nothing is visible and nothing runs (for cron)");
  cmd->add_option("-n,--max-messages", f->max_messages, "Exit after taking N messages")
      ->type_name("N");
  cmd->add_option("--trip", f->trip,
                  "Circuit breaker: after N failures within DUR, pause the queue (with the "
                  "reason) and stop as on SIGTERM; exit 75")
      ->type_name("N/DUR");
  cmd->add_flag("-q,--quiet", f->quiet, "No progress line, notes or summary on stderr");
  cmd->add_option("--to", f->to,
                  "A stage: the stdout of each successful run becomes messages on DST, sent in "
                  "the transaction that acks the message (exactly once per ack; on nats:// "
                  "published just before the ack, a retry stored once: see man q-work)")
      ->type_name("DST");
  cmd->add_flag("--to-lines", f->to_lines,
                "With --to: one message per line of the output (default: the whole output as "
                "one message; empty output sends nothing)");
  cmd->add_option("--to-max-bytes", f->to_max_bytes,
                  "With --to: the most stdout a run may write; more fails the run (default: "
                  "DST's max message size)")
      ->type_name("N")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{q::kMaxMaxSize}));
  cmd->add_option("--to-attr", f->to_attributes,
                  "With --to: set an attribute on the output messages (repeatable; the "
                  "source's attributes are carried over)")
      ->type_name("K=V");
  cmd->add_option("--to-group", f->to_group,
                  "With --to: the FIFO group of the output messages (default: the source's)")
      ->type_name("G");
  cmd->callback([f, &ctx] { run_work(*f, ctx); });
}

}  // namespace cli
