// q redrive QUEUE [--id ID]... [--max N] [--dry-run]
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "context.hpp"
#include "output.hpp"

namespace cli {
namespace {

struct RedriveFlags {
  std::string queue;
  std::vector<std::string> ids;
  std::optional<std::uint64_t> max;
  bool dry_run = false, json = false;
};

void run_redrive(const RedriveFlags& f, Context& ctx) {
  q::RedriveOptions options;
  options.ids = f.ids;
  options.max = f.max;
  options.dry_run = f.dry_run;
  for (const auto& m : ctx.open()->redrive(f.queue, options))
    ctx.out += f.json ? message_json(m, false) : m.id + "\n";
}

}  // namespace

void add_redrive(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<RedriveFlags>();
  auto* cmd = app.add_subcommand(
      "redrive", "Move dead letters back into their queue, oldest first, once the bug is "
                 "fixed; each keeps its id and starts again at receive count 0. Prints the "
                 "ids moved");
  if (!ctx.wants("redrive")) return;
  cmd->add_option("QUEUE", f->queue, "Queue whose dead letters move back")->required();
  cmd->add_option("--id", f->ids, "Move only this dead letter (repeatable)")
      ->type_name("ID")
      ->allow_extra_args(false);
  cmd->add_option("--max", f->max, "Move at most N")->type_name("N");
  cmd->add_flag("--dry-run", f->dry_run, "Print what would move, move nothing");
  cmd->add_flag("--json", f->json, "One JSON object a line per dead letter");
  cmd->callback([f, &ctx] { run_redrive(*f, ctx); });
}

}  // namespace cli
