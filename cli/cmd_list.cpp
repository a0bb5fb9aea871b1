// q list: the queues of the file, one name a line.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"

namespace cli {

void add_list(CLI::App& app, Context& ctx) {
  auto json = std::make_shared<bool>(false);
  if (!ctx.wants("list")) return;
  auto* cmd = app.add_subcommand("list", "List the queues of the file, one name a line");
  cmd->add_flag("--json", *json, "One {\"queue\":..} object a line");
  cmd->callback([json, &ctx] {
    for (const auto& name : ctx.open_for_reading()->list_queues())
      ctx.out += *json ? JsonObject().str("queue", name).done() + "\n" : name + "\n";
  });
}

}  // namespace cli
