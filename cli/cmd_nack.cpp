// q nack QUEUE RECEIPT [--delay DUR | --backoff] [--reason TEXT]
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"

namespace cli {
namespace {

struct NackFlags {
  std::string queue, receipt, reason;
  std::optional<std::string> delay;
  std::string backoff_base = "1s", backoff_cap = "15m";
  bool backoff = false, json = false;
};

void run_nack(const NackFlags& f, Context& ctx) {
  q::NackOptions options;
  options.delay = duration_flag("--delay", f.delay).value_or(0);
  options.backoff = f.backoff;
  options.backoff_base = duration_flag("--backoff-base", f.backoff_base);
  options.backoff_cap = duration_flag("--backoff-cap", f.backoff_cap);
  options.reason = f.reason;
  q::Millis visible_at = ctx.open()->nack(f.queue, f.receipt, options);
  if (f.json)
    ctx.out += JsonObject().str("receipt", f.receipt).time("visible_at", visible_at).done() + "\n";
}

}  // namespace

void add_nack(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<NackFlags>();
  if (!ctx.wants("nack")) return;
  auto* cmd =
      app.add_subcommand("nack",
                         "Release a received message for another delivery: now, after --delay, or "
                         "after a jittered --backoff. The receipt is spent");
  cmd->add_option("QUEUE", f->queue, "Queue the message came from")->required();
  cmd->add_option("RECEIPT", f->receipt, "Receipt from 'q receive'")->required();
  auto* delay = cmd->add_option("--delay", f->delay, "Visible again after DUR (at most 12h)")
                    ->type_name("DUR");
  cmd->add_flag("--backoff", f->backoff,
                "Visible again after a random delay in [0, min(cap, base * 2^(receives-1))] "
                "(full jitter)")
      ->excludes(delay);
  cmd->add_option("--backoff-base", f->backoff_base, "Backoff base (default 1s)")->type_name("DUR");
  cmd->add_option("--backoff-cap", f->backoff_cap, "Backoff cap (default 15m)")->type_name("DUR");
  cmd->add_option("--reason", f->reason,
                  "Why it failed; kept with the message and shown by 'q dlq list'")
      ->type_name("TEXT");
  cmd->add_flag("--json", f->json, "Print {\"receipt\":..,\"visible_at\":..}");
  cmd->callback([f, &ctx] { run_nack(*f, ctx); });
}

}  // namespace cli
