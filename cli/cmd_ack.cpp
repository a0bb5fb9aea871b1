// q ack QUEUE RECEIPT... (or receipts from stdin, one a line)
#include <iostream>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"
#include "cli/input.hpp"

namespace cli {
namespace {

struct AckFlags {
  std::string queue;
  std::vector<std::string> receipts;
};

void run_ack(const AckFlags& f, Context& ctx) {
  std::vector<std::string> receipts = f.receipts;
  if (receipts.empty()) {
    // A person at a terminal who forgot the receipt would wait for nothing.
    if (isatty(STDIN_FILENO))
      throw q::Error(q::ErrorKind::Usage,
                     "no receipts given: pass them as arguments or one a line on standard "
                     "input (which is a terminal)");
    for (auto& line : split_records(read_stdin(), '\n'))
      if (!line.empty()) receipts.push_back(std::move(line));
    if (receipts.empty())
      throw q::Error(q::ErrorKind::Usage, "no receipts given: standard input was empty");
  }
  auto results = ctx.open()->ack(f.queue, receipts);
  bool stale = false, malformed = false;
  for (const auto& r : results) {
    if (r.outcome == q::ReceiptOutcome::Done) continue;
    print_error(r.detail);
    stale |= r.outcome == q::ReceiptOutcome::Stale;
    malformed |= r.outcome == q::ReceiptOutcome::Malformed;
  }
  if (malformed)
    ctx.exit = kDataErr;
  else if (stale)
    ctx.exit = kStale;
}

}  // namespace

void add_ack(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<AckFlags>();
  if (!ctx.wants("ack")) return;
  auto* cmd = app.add_subcommand(
      "ack",
      "Acknowledge (delete) received messages by receipt; each receipt on its own. "
      "Exit 3 if any was stale, 65 if any was malformed");
  cmd->add_option("QUEUE", f->queue, "Queue the messages came from")->required();
  cmd->add_option("RECEIPT", f->receipts, "Receipts; none: read them from stdin, one a line");
  cmd->callback([f, &ctx] { run_ack(*f, ctx); });
}

}  // namespace cli
