// q verify: check the whole queue file.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/location.hpp"

namespace cli {

void add_verify(CLI::App& app, Context& ctx) {
  if (!ctx.wants("verify")) return;
  auto* cmd = app.add_subcommand(
      "verify",
      "Check the whole queue file, read-only and safe while it is in use: every "
      "record's checksum, every index entry, the counters. Exit 0 only when all is "
      "consistent, else 74 with one line per problem. On nats://: q's settings and "
      "lease records against the streams");
  cmd->callback([&ctx] {
    auto problems = ctx.open_for_reading()->verify();
    for (const auto& p : problems) ctx.out += p + "\n";
    if (problems.empty())
      ctx.out += fmt::format("{}: consistent\n", q::redact_location(ctx.queue_file()));
    else
      ctx.exit = kIoErr;
  });
}

}  // namespace cli
