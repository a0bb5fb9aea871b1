// q delete QUEUE [--dry-run] [-y]: remove a queue with its messages and dead letters.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/confirm.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"

namespace cli {
namespace {

void run_delete(const EmptyQueueFlags& f, Context& ctx) {
  auto broker = ctx.open();
  auto s = broker->stats(f.queue).at(0);
  std::string counts =
      fmt::format("{}, {}", q::plural(s.visible + s.in_flight + s.delayed, "message"),
                  q::plural(s.dead, "dead letter"));
  if (!may_destroy(f.destructive, ctx,
                   {fmt::format("would delete queue {} ({})", f.queue, counts),
                    fmt::format("delete queue {} ({})?", f.queue, counts),
                    fmt::format("queue {} was not deleted", f.queue)}))
    return;
  auto removed = broker->delete_queue(f.queue);
  print_error(fmt::format("deleted queue {} ({}, {})", f.queue,
                          q::plural(removed.messages, "message"),
                          q::plural(removed.dead_letters, "dead letter")));
}

}  // namespace

void add_delete(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<EmptyQueueFlags>();
  if (!ctx.wants("delete")) return;
  auto* cmd =
      app.add_subcommand("delete",
                         "Delete a queue with all its messages and dead letters. Asks first on a "
                         "terminal; the counts go to stderr");
  cmd->add_option("QUEUE", f->queue, "Queue to delete")->required();
  add_destructive_flags(cmd, f->destructive);
  cmd->callback([f, &ctx] { run_delete(*f, ctx); });
}

}  // namespace cli
