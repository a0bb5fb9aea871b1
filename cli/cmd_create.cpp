// q create QUEUE [settings]; the settings flags it shares with q config.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"
#include "cli/settings_flags.hpp"
#include "libq/timefmt.hpp"

namespace cli {

void add_settings(CLI::App* cmd, SettingsFlags& f) {
  cmd->add_option("QUEUE", f.queue, "Queue name: 1 to 80 letters, digits, '-', '_', '.'")
      ->required();
  cmd->add_option("--visibility-timeout", f.visibility_timeout,
                  "How long a received message stays hidden before it is delivered again "
                  "(default 30s, at most 12h)")
      ->type_name("DUR");
  cmd->add_option("--max-receives", f.max_receives,
                  "Deliveries before a message moves to the dead-letter queue (default 5, "
                  "1 to 1000; 0 never)")
      ->type_name("N");
  cmd->add_option("--retention", f.retention,
                  "How long an unacknowledged message is kept (default 4d)")
      ->type_name("DUR");
  cmd->add_option("--delay", f.delay, "Delay before a new message is visible (default 0s)")
      ->type_name("DUR");
  cmd->add_option("--max-depth", f.max_depth,
                  "Refuse sends beyond this many waiting messages, exit 75 (default 0: "
                  "unlimited)")
      ->type_name("N");
  cmd->add_option("--max-size", f.max_size,
                  "Largest body: bytes, or 512K, 10M, 1MiB (binary), 10MB (decimal) (default "
                  "1048576, 1M)")
      ->type_name("BYTES");
  cmd->add_option("--dedup-window", f.dedup_window,
                  "How long a --dedup-id is remembered (default 5m)")
      ->type_name("DUR");
  cmd->add_option("--rate", f.rate,
                  "Messages per second that all 'q work' consumers of the queue together may "
                  "start, like 50/s, 3000/m (default 0: no limit)")
      ->type_name("N/s");
  cmd->add_option("--content-dedup", f.content_dedup,
                  "FIFO queues: without --dedup-id, a body sent again within the dedup window "
                  "is a duplicate (SHA-256 of the body)")
      ->type_name("on|off")
      ->transform(CLI::IsMember({"on", "off"}))
      ->each([&f](const std::string& v) { f.content_dedup = v == "on"; });
}

std::string settings_text(const std::string& queue, const q::QueueConfig& c, bool json) {
  if (json)
    return JsonObject()
               .str("queue", queue)
               .num("visibility_timeout_ms", c.visibility_timeout)
               .num("max_receives", c.max_receives)
               .num("retention_ms", c.retention)
               .num("delay_ms", c.delay)
               .num("max_depth", static_cast<long long>(c.max_depth))
               .num("max_size", c.max_size)
               .num("dedup_window_ms", c.dedup_window)
               .real("rate_per_second", c.rate)
               .str("kind", c.fifo ? "fifo" : "standard")
               .boolean("fifo", c.fifo)
               .boolean("content_dedup", c.content_dedup)
               .done() +
           "\n";
  Table t;
  t.row({"queue", queue});
  t.row({"kind", c.fifo ? "FIFO" : "standard"});
  t.row({"visibility-timeout", q::format_duration(c.visibility_timeout)});
  t.row({"max-receives", c.max_receives ? std::to_string(c.max_receives) : "0 (never)"});
  t.row({"retention", q::format_duration(c.retention)});
  t.row({"delay", q::format_duration(c.delay)});
  t.row({"max-depth", c.max_depth ? std::to_string(c.max_depth) : "0 (unlimited)"});
  t.row({"max-size", std::to_string(c.max_size)});
  t.row({"dedup-window", q::format_duration(c.dedup_window)});
  t.row({"rate", c.rate > 0 ? fmt::format("{}/s", c.rate) : "0 (no limit)"});
  if (c.fifo) t.row({"content-dedup", c.content_dedup ? "on" : "off"});
  return t.render();
}

void add_create(CLI::App& app, Context& ctx) {
  auto create_flags = std::make_shared<SettingsFlags>();
  if (!ctx.wants("create")) return;
  auto* create =
      app.add_subcommand("create",
                         "Create a queue (and the queue file when missing); an existing queue with "
                         "the same settings is fine");
  add_settings(create, *create_flags);
  create->add_flag("--fifo", create_flags->fifo,
                   "A FIFO queue: messages carry a --group and each group is delivered in send "
                   "order, one delivery at a time (fixed once created)");
  create->callback([create_flags, &ctx] {
    auto change = create_flags->change();
    ctx.open(/*create=*/true)->create_queue(create_flags->queue, change);
  });
}

}  // namespace cli
