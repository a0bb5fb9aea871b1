// q backup FILE: a copy of the whole queue file.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"

namespace cli {

void add_backup(CLI::App& app, Context& ctx) {
  auto target = std::make_shared<std::string>();
  if (!ctx.wants("backup")) return;
  auto* cmd = app.add_subcommand(
      "backup",
      "Write a consistent, compacted copy of the queue file to FILE while producers "
      "and consumers keep running (replaced atomically). On nats://: a queue file "
      "holding every queue of the namespace, read queue by queue");
  cmd->add_option("FILE", *target, "Where the copy goes")->required();
  cmd->callback([target, &ctx] { ctx.open()->backup(*target); });
}

}  // namespace cli
