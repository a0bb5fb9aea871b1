// q purge QUEUE [--dry-run] [-y]: remove every message (not the dead letters).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/confirm.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"

namespace cli {
namespace {

void run_purge(const EmptyQueueFlags& f, Context& ctx) {
  auto broker = ctx.open();
  auto s = broker->stats(f.queue).at(0);
  std::uint64_t n = s.visible + s.in_flight + s.delayed;
  if (!may_destroy(
          f.destructive, ctx,
          {fmt::format("would purge {} from {} (visible {}, in flight {}, delayed {}; "
                       "{} stay)",
                       q::plural(n, "message"), f.queue, s.visible, s.in_flight, s.delayed,
                       q::plural(s.dead, "dead letter")),
           fmt::format("purge {} from {} (dead letters stay)?", q::plural(n, "message"), f.queue),
           fmt::format("nothing was purged from {}", f.queue)}))
    return;
  auto removed = broker->purge(f.queue);
  print_error(fmt::format("purged {} from {}", q::plural(removed, "message"), f.queue));
}

}  // namespace

void add_purge(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<EmptyQueueFlags>();
  if (!ctx.wants("purge")) return;
  auto* cmd = app.add_subcommand(
      "purge",
      "Remove every message of a queue, visible, in flight or delayed (dead letters "
      "stay; see 'q dlq purge'). Asks first on a terminal; the count goes to stderr");
  cmd->add_option("QUEUE", f->queue, "Queue to empty")->required();
  add_destructive_flags(cmd, f->destructive);
  cmd->callback([f, &ctx] { run_purge(*f, ctx); });
}

}  // namespace cli
