// q receive QUEUE [-n N] [--wait DUR] [--visibility-timeout DUR] [--holder PID] [--json]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/holder.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct ReceiveFlags {
  std::string queue;
  std::uint32_t max = 1;
  std::optional<std::string> wait, visibility_timeout, holder;
  bool json = false;
};

void run_receive(const ReceiveFlags& f, Context& ctx) {
  q::ReceiveOptions options;
  options.max_messages = f.max;
  options.wait = duration_flag("--wait", f.wait).value_or(0);
  options.visibility_timeout = duration_flag("--visibility-timeout", f.visibility_timeout);
  if (f.holder) {
    auto pid = count_flag("--holder", *f.holder, INT32_MAX);
    options.holder = q::find_holder(static_cast<std::uint32_t>(pid));
    if (pid == 0 || !options.holder)
      throw q::Error(q::ErrorKind::Usage,
                     fmt::format("--holder {}: no such process (give the pid of the process "
                                 "that works on the messages, like $$ in a shell loop)",
                                 *f.holder));
  }

  auto broker = ctx.open();
  // On a cluster a helper answers for the pid while it lives (q(1), HOLDERS).
  if (options.holder) broker->announce_holder(*options.holder, false);
  auto messages = broker->receive(f.queue, options);
  if (messages.empty()) {
    ctx.exit = kEmpty;
    // A paused queue must not look like an empty one: say so (exit 1 all the same).
    auto stats = broker->stats(f.queue);
    if (!stats.empty() && stats[0].pause) {
      const q::Pause& p = *stats[0].pause;
      print_error(fmt::format(
          "queue {} is paused{}{}; nothing was received ('q resume {}' ends it)", f.queue,
          p.until ? " until " + q::format_time(p.until) : std::string(" until resumed"),
          p.reason.empty() ? std::string() : ": " + p.reason, f.queue));
    }
    return;
  }
  for (const auto& m : messages) {
    if (f.json)
      ctx.out += message_json(m, false);
    else
      ctx.out +=
          fmt::format("{}\t{}\t{}\t{}\n", m.id, m.receipt, m.receive_count, text_escape(m.body));
  }
}

}  // namespace

void add_receive(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ReceiveFlags>();
  if (!ctx.wants("receive")) return;
  auto* cmd = app.add_subcommand(
      "receive",
      "Receive messages: each is hidden for the visibility timeout and must be acked with "
      "its receipt. Prints ID, RECEIPT, RECEIVE_COUNT and BODY (escaped) separated by tabs, "
      "or --json. Exit 1 when there is nothing to receive");
  cmd->add_option("QUEUE", f->queue, "Queue to receive from")->required();
  cmd->add_option("-n,--max", f->max, "Receive up to N messages (default 1)")
      ->type_name("N")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--wait", f->wait,
                  "Long poll: wait up to DUR for a message (wakes within milliseconds of a "
                  "send)")
      ->type_name("DUR");
  cmd->add_option("--visibility-timeout", f->visibility_timeout,
                  "Hide the messages for DUR instead of the queue's timeout")
      ->type_name("DUR");
  cmd->add_option("--holder", f->holder,
                  "Held by process PID: when it dies, the messages are released at once "
                  "(reason 'holder died') instead of at the end of their visibility timeout")
      ->type_name("PID");
  cmd->add_flag("--json", f->json,
                "One JSON object a line: id, receipt, body (or body_base64), receive_count, "
                "sent_at, attributes, ...");
  cmd->callback([f, &ctx] { run_receive(*f, ctx); });
}

}  // namespace cli
