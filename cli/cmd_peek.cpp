// q peek QUEUE [-n N] [--json]: look without receiving.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"

namespace cli {
namespace {

struct PeekFlags {
  std::string queue;
  std::size_t max = 10;
  bool json = false;
};

void run_peek(const PeekFlags& f, Context& ctx) {
  for (const auto& m : ctx.open_for_reading()->peek(f.queue, f.max)) {
    if (f.json)
      ctx.out += message_json(m, true);
    else
      ctx.out += fmt::format("{}\t{}\t{}\t{}\n", m.id, q::to_string(m.state), m.receive_count,
                             text_escape(m.body));
  }
}

}  // namespace

void add_peek(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<PeekFlags>();
  if (!ctx.wants("peek")) return;
  auto* cmd = app.add_subcommand(
      "peek",
      "Show the oldest messages of a queue without receiving them (no receive count "
      "change): ID, STATE, RECEIVE_COUNT, BODY separated by tabs");
  cmd->add_option("QUEUE", f->queue, "Queue to look at")->required();
  cmd->add_option("-n,--max", f->max, "Show up to N messages (default 10)")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}));
  cmd->add_flag("--json", f->json, "One JSON object a line, with the message's state");
  cmd->callback([f, &ctx] { run_peek(*f, ctx); });
}

}  // namespace cli
