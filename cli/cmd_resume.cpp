// q resume QUEUE: end a pause.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"

namespace cli {

void add_resume(CLI::App& app, Context& ctx) {
  if (!ctx.wants("resume")) return;
  auto queue = std::make_shared<std::string>();
  auto* cmd =
      app.add_subcommand("resume",
                         "End a queue's pause: deliveries start again at once. A queue that is not "
                         "paused is fine (exit 0)");
  cmd->add_option("QUEUE", *queue, "Queue to resume")->required();
  cmd->callback([queue, &ctx] {
    auto was = ctx.open()->resume(*queue);
    ctx.out +=
        was ? fmt::format("resumed {}\n", *queue) : fmt::format("{} was not paused\n", *queue);
  });
}

}  // namespace cli
