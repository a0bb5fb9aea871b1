// q purge QUEUE: remove every message (not the dead letters).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "context.hpp"

namespace cli {

void add_purge(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  if (!ctx.wants("purge")) return;
  auto* cmd = app.add_subcommand(
      "purge", "Remove every message of a queue, visible, in flight or delayed (dead letters "
               "stay; see 'q dlq purge'). Does not prompt");
  cmd->add_option("QUEUE", *queue, "Queue to empty")->required();
  cmd->callback([queue, &ctx] {
    auto removed = ctx.open()->purge(*queue);
    ctx.out += fmt::format("purged {} from {}\n", q::plural(removed, "message"), *queue);
  });
}

}  // namespace cli
