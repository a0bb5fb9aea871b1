// q export QUEUE: messages as JSON lines, to move them between files (q import)
// or to look at a queue with jq.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"

namespace cli {

void add_export(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  if (!ctx.wants("export")) return;
  auto* cmd = app.add_subcommand(
      "export",
      "Write every message of a queue, dead letters included, as JSON lines: id, "
      "body (or body_base64), attributes, times, receive count, state");
  cmd->add_option("QUEUE", *queue, "Queue to export")->required();
  cmd->callback([queue, &ctx] {
    // Streamed: what is printed leaves in pieces of 64 KiB, so memory stays
    // that of one message whatever the queue holds.
    struct ClosedOutput {};
    try {
      ctx.open_for_reading()->export_messages(*queue, [&](const q::Message& m) {
        ctx.out += message_json(m, true);
        if (ctx.out.size() < (1 << 16)) return;
        bool written = write_stdout(ctx.out);
        ctx.out.clear();
        if (!written) throw ClosedOutput{};
      });
    } catch (const ClosedOutput&) {
      ctx.exit = kIoErr;
    }
  });
}

}  // namespace cli
