// q extend QUEUE RECEIPT --by DUR: the heartbeat of long work.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"

namespace cli {
namespace {

struct ExtendFlags {
  std::string queue, receipt, by;
  bool json = false;
};

void run_extend(const ExtendFlags& f, Context& ctx) {
  q::Millis by = duration_flag("--by", f.by);
  q::Millis until = ctx.open()->extend(f.queue, f.receipt, by);
  if (f.json)
    ctx.out += JsonObject().str("receipt", f.receipt).time("visible_until", until).done() + "\n";
}

}  // namespace

void add_extend(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ExtendFlags>();
  if (!ctx.wants("extend")) return;
  auto* cmd =
      app.add_subcommand("extend",
                         "Keep a received message hidden until now + DUR (at most 12h after its "
                         "receive); the receipt stays valid");
  cmd->add_option("QUEUE", f->queue, "Queue the message came from")->required();
  cmd->add_option("RECEIPT", f->receipt, "Receipt from 'q receive'")->required();
  cmd->add_option("--by", f->by, "New visibility timeout, counted from now")
      ->type_name("DUR")
      ->required();
  cmd->add_flag("--json", f->json, "Print {\"receipt\":..,\"visible_until\":..}");
  cmd->callback([f, &ctx] { run_extend(*f, ctx); });
}

}  // namespace cli
