// q pause QUEUE [--for DUR] [--reason TEXT]: stop deliveries; sends go on.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct PauseFlags {
  std::string queue;
  std::optional<std::string> for_;
  std::string reason;
};

void run_pause(const PauseFlags& f, Context& ctx) {
  auto length = duration_flag("--for", f.for_);
  if (length && *length <= 0) throw q::Error(q::ErrorKind::Usage, "--for: must be above 0");
  auto broker = ctx.open();
  q::Millis until = length ? q::SystemClock().now() + *length : 0;
  broker->pause(f.queue, until, f.reason);
  ctx.out += fmt::format("paused {}{}\n", f.queue,
                         until ? " until " + q::format_time(until) : " until 'q resume'");
}

}  // namespace

void add_pause(CLI::App& app, Context& ctx) {
  if (!ctx.wants("pause")) return;
  auto f = std::make_shared<PauseFlags>();
  auto* cmd = app.add_subcommand(
      "pause",
      "Stop deliveries of a queue (receive finds nothing, exit 1; q work idles) until "
      "'q resume' or --for ends; sends are still accepted. Pausing again replaces the "
      "pause");
  cmd->add_option("QUEUE", f->queue, "Queue to pause")->required();
  cmd->add_option("--for", f->for_, "End the pause after DUR (default: until 'q resume')")
      ->type_name("DUR");
  cmd->add_option("--reason", f->reason, "Why, shown by stats, top, check and Prometheus")
      ->type_name("TEXT");
  cmd->callback([f, &ctx] { run_pause(*f, ctx); });
}

}  // namespace cli
