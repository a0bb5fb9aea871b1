// q delete QUEUE: remove a queue with its messages and dead letters.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "context.hpp"

namespace cli {

void add_delete(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  if (!ctx.wants("delete")) return;
  auto* cmd = app.add_subcommand(
      "delete", "Delete a queue with all its messages and dead letters. Does not prompt");
  cmd->add_option("QUEUE", *queue, "Queue to delete")->required();
  cmd->callback([queue, &ctx] {
    auto removed = ctx.open()->delete_queue(*queue);
    ctx.out += fmt::format("deleted queue {} ({}, {})\n", *queue,
                           q::plural(removed.messages, "message"),
                           q::plural(removed.dead_letters, "dead letter"));
  });
}

}  // namespace cli
