// q stats [QUEUE] [--json]: depth by state, oldest age, lifetime counters.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "context.hpp"
#include "output.hpp"
#include "timefmt.hpp"

namespace cli {
namespace {

struct StatsFlags {
  std::string queue;
  bool json = false;
};

std::string age_text(const std::optional<q::Millis>& age) {
  if (!age) return "-";
  q::Millis a = *age;
  if (a < q::kMinute) return fmt::format("{:.1f}s", static_cast<double>(a) / q::kSecond);
  if (a < q::kHour) return fmt::format("{}m{}s", a / q::kMinute, a % q::kMinute / q::kSecond);
  if (a < q::kDay) return fmt::format("{}h{}m", a / q::kHour, a % q::kHour / q::kMinute);
  return fmt::format("{}d{}h", a / q::kDay, a % q::kDay / q::kHour);
}

std::string stats_json(const q::QueueStats& s) {
  const auto& c = s.counters;
  JsonObject o;
  o.str("queue", s.name)
      .num("visible", static_cast<long long>(s.visible))
      .num("in_flight", static_cast<long long>(s.in_flight))
      .num("delayed", static_cast<long long>(s.delayed))
      .num("dead", static_cast<long long>(s.dead));
  if (s.oldest_age)
    o.num("oldest_age_ms", *s.oldest_age);
  else
    o.null("oldest_age_ms");
  o.num("sent", static_cast<long long>(c.sent))
      .num("received", static_cast<long long>(c.received))
      .num("acked", static_cast<long long>(c.acked))
      .num("nacked", static_cast<long long>(c.nacked))
      .num("dead_lettered", static_cast<long long>(c.dead_lettered))
      .num("redriven", static_cast<long long>(c.redriven))
      .num("expired", static_cast<long long>(c.expired))
      .num("deduplicated", static_cast<long long>(c.deduplicated))
      .time("created_at", s.created_at);
  o.str("kind", s.config.fifo ? "fifo" : "standard");
  if (s.config.fifo)
    o.num("groups", static_cast<long long>(s.groups))
        .num("held_groups", static_cast<long long>(s.held_groups));
  return o.done() + "\n";
}

void run_stats(const StatsFlags& f, Context& ctx) {
  auto all = ctx.open()->stats(f.queue);
  if (f.json) {
    for (const auto& s : all) ctx.out += stats_json(s);
    return;
  }
  Table t;
  t.row({"QUEUE", "VISIBLE", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST", "SENT", "ACKED"});
  for (const auto& s : all)
    t.row({s.name, std::to_string(s.visible), std::to_string(s.in_flight),
           std::to_string(s.delayed), std::to_string(s.dead), age_text(s.oldest_age),
           std::to_string(s.counters.sent), std::to_string(s.counters.acked)});
  ctx.out += t.render();
  if (all.size() != 1 || f.queue.empty()) return;
  const auto& s = all.front();
  if (s.config.fifo)
    ctx.out += fmt::format("\nFIFO: {} groups with messages, {} held by a delivery in flight\n",
                           s.groups, s.held_groups);
  const auto& c = s.counters;
  ctx.out += fmt::format(
      "\nlifetime: sent {}, received {}, acked {}, nacked {}, dead-lettered {}, redriven {}, "
      "expired {}, deduplicated {}\n",
      c.sent, c.received, c.acked, c.nacked, c.dead_lettered, c.redriven, c.expired,
      c.deduplicated);
}

}  // namespace

void add_stats(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<StatsFlags>();
  auto* cmd = app.add_subcommand(
      "stats", "Show every queue (or one): visible, in flight, delayed, dead, age of the "
               "oldest message, and lifetime counters");
  if (!ctx.wants("stats")) return;
  cmd->add_option("QUEUE", f->queue, "Only this queue");
  cmd->add_flag("--json", f->json, "One JSON object a line per queue");
  cmd->callback([f, &ctx] { run_stats(*f, ctx); });
}

}  // namespace cli
