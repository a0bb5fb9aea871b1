// q stats [QUEUE] [--json | --prometheus [--output FILE] | --watch [--interval DUR]]
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "libq/location.hpp"
#include "libq/files.hpp"
#include "cli/output.hpp"
#include "cli/work/rates.hpp"
#include "cli/work/stop_signals.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct StatsFlags {
  std::string queue;
  bool json = false, prometheus = false, watch = false;
  std::optional<std::string> output, interval;
};

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
      .num("stale_acks", static_cast<long long>(c.stale_acks))
      .time("created_at", s.created_at);
  o.str("kind", s.config.fifo ? "fifo" : "standard");
  if (s.config.fifo)
    o.num("groups", static_cast<long long>(s.groups))
        .num("held_groups", static_cast<long long>(s.held_groups));
  o.boolean("paused", s.pause.has_value());
  if (s.pause) {
    o.time("paused_since", s.pause->since);
    if (s.pause->until)
      o.time("paused_until", s.pause->until);
    else
      o.null("paused_until");
    o.str("pause_reason", s.pause->reason);
  }
  return o.done() + "\n";
}

// "jobs: paused until 2026-...Z (for 4m12s more): smtp down" for stats and check.
std::string pause_line(const q::QueueStats& s) {
  const auto& p = *s.pause;
  std::string line = s.name + ": paused";
  if (p.until)
    line += fmt::format(" until {} ({} more)", q::format_time(p.until),
                        short_duration(std::max<q::Millis>(0, p.until - q::SystemClock().now())));
  else
    line += " until 'q resume'";
  if (!p.reason.empty()) line += ": " + text_escape(p.reason);
  return line;
}

std::string stats_table(const std::vector<q::QueueStats>& all, bool one_queue) {
  Table t;
  t.row({"QUEUE", "VISIBLE", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST", "SENT", "ACKED"});
  for (const auto& s : all)
    t.row({s.name, std::to_string(s.visible), std::to_string(s.in_flight),
           std::to_string(s.delayed), std::to_string(s.dead), short_duration(s.oldest_age),
           std::to_string(s.counters.sent), std::to_string(s.counters.acked)});
  std::string out = t.render();
  for (const auto& s : all)
    if (s.pause) out += pause_line(s) + "\n";
  if (all.size() != 1 || !one_queue) return out;
  const auto& s = all.front();
  if (s.config.fifo)
    out += fmt::format("\nFIFO: {} with messages, {} held by a delivery in flight\n",
                       q::plural(s.groups, "group"), s.held_groups);
  const auto& c = s.counters;
  out += fmt::format(
      "\nlifetime: sent {}, received {}, acked {}, nacked {}, dead-lettered {}, redriven {}, "
      "expired {}, deduplicated {}, stale acks {}\n",
      c.sent, c.received, c.acked, c.nacked, c.dead_lettered, c.redriven, c.expired, c.deduplicated,
      c.stale_acks);
  return out;
}

// A label value: backslash, double quote and newline escaped as the text
// format wants; other control characters would be taken literally, so they go.
std::string prometheus_label(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else if (c < 0x20 || c == 0x7F)
      out += ' ';
    else
      out += static_cast<char>(c);
  }
  return out;
}

// The node_exporter textfile-collector format.
// Every series carries the queue file (`file`), so that two files with the
// same queue names do not clash in one collector.
std::string prometheus(const std::vector<q::QueueStats>& all, const std::string& file) {
  std::string out;
  std::string escaped;
  for (char c : file) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  auto labels = [&](const q::QueueStats& s) {
    return fmt::format("file=\"{}\",queue=\"{}\"", escaped, s.name);
  };
  auto family = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  family("q_messages", "gauge", "Messages in a queue by state.");
  for (const auto& s : all) {
    for (auto [state, n] : {std::pair{"visible", s.visible}, std::pair{"in_flight", s.in_flight},
                            std::pair{"delayed", s.delayed}, std::pair{"dead", s.dead}})
      out += fmt::format("q_messages{{{},state=\"{}\"}} {}\n", labels(s), state, n);
  }
  family("q_oldest_message_age_seconds", "gauge",
         "Age of the oldest message that is visible or in flight (0 when there is none).");
  for (const auto& s : all)
    out += fmt::format("q_oldest_message_age_seconds{{{}}} {:.3f}\n", labels(s),
                       static_cast<double>(s.oldest_age.value_or(0)) / 1000.0);
  struct Counter {
    const char* name;
    const char* help;
    std::uint64_t q::QueueCounters::*field;
  };
  const Counter counters[] = {
      {"q_sent_total", "Messages sent.", &q::QueueCounters::sent},
      {"q_received_total", "Deliveries.", &q::QueueCounters::received},
      {"q_acked_total", "Messages acknowledged.", &q::QueueCounters::acked},
      {"q_nacked_total", "Messages released for another delivery.", &q::QueueCounters::nacked},
      {"q_dead_lettered_total", "Messages moved to the dead-letter queue.",
       &q::QueueCounters::dead_lettered},
      {"q_redriven_total", "Dead letters moved back.", &q::QueueCounters::redriven},
      {"q_expired_total", "Messages and dead letters removed by retention.",
       &q::QueueCounters::expired},
      {"q_deduplicated_total", "Sends stored nothing: a duplicate dedup id.",
       &q::QueueCounters::deduplicated},
      {"q_stale_acks_total",
       "Acks refused as stale: the lease had run out and the message went again (work done twice).",
       &q::QueueCounters::stale_acks}};
  for (const auto& c : counters) {
    family(c.name, "counter", c.help);
    for (const auto& s : all)
      out += fmt::format("{}{{{}}} {}\n", c.name, labels(s), s.counters.*c.field);
  }
  family("q_paused", "gauge", "1 while the queue is paused (q pause): it delivers nothing.");
  for (const auto& s : all) out += fmt::format("q_paused{{{}}} {}\n", labels(s), s.pause ? 1 : 0);
  family("q_paused_until_seconds", "gauge",
         "When the pause ends, Unix time; 0 when not paused or paused until 'q resume'.");
  for (const auto& s : all)
    out += fmt::format("q_paused_until_seconds{{{}}} {:.3f}\n", labels(s),
                       s.pause ? static_cast<double>(s.pause->until) / 1000.0 : 0.0);
  family("q_pause_info", "gauge", "The reason of a pause in force, as a label (value 1).");
  for (const auto& s : all)
    if (s.pause)
      out += fmt::format("q_pause_info{{{},reason=\"{}\"}} 1\n", labels(s),
                         prometheus_label(s.pause->reason));
  bool any_fifo = false;
  for (const auto& s : all) any_fifo |= s.config.fifo;
  if (any_fifo) {
    family("q_groups", "gauge", "FIFO queues: message groups with messages.");
    for (const auto& s : all)
      if (s.config.fifo) out += fmt::format("q_groups{{{}}} {}\n", labels(s), s.groups);
    family("q_held_groups", "gauge", "FIFO queues: groups held by a delivery in flight.");
    for (const auto& s : all)
      if (s.config.fifo) out += fmt::format("q_held_groups{{{}}} {}\n", labels(s), s.held_groups);
  }
  return out;
}

// Replaces FILE at once: a collector never reads half a file.
void write_atomically(const std::string& path, const std::string& data) {
  // TARGET.tmp-PID, never through a link; leftovers of killed runs go first.
  q::files::AtomicFile file(path, 0644);
  auto fail = [&](const char* doing) {
    int err = errno;
    // A missing directory is "not found" (66), as for q backup.
    throw q::Error(err == EACCES || err == EPERM     ? q::ErrorKind::Permission
                   : err == ENOENT || err == ENOTDIR ? q::ErrorKind::NotFound
                                                     : q::ErrorKind::Io,
                   fmt::format("--output {}: {}: {}", path, doing, std::strerror(err)));
  };
  if (file.fd() < 0) fail("cannot create");
  if (!file.write(data)) fail("cannot write");
  if (!file.commit(false)) fail("cannot replace");
}

// One line per queue per interval, for logs.
void watch(const StatsFlags& f, Context& ctx, q::Millis interval) {
  install_stop_signals({SIGINT, SIGTERM});
  auto broker = ctx.open_for_reading();
  RateMeter meter;
  meter.sample(*broker, f.queue);
  while (!stop_signals()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(interval));
    if (stop_signals()) break;
    std::string lines;
    std::string at = q::format_time(q::SystemClock().now());
    for (const auto& r : meter.sample(*broker, f.queue)) {
      const auto& s = r.stats;
      auto empty = r.time_to_empty();
      lines += fmt::format(
          "{} {} visible={} in_flight={} delayed={} dead={} oldest={} in={:.1f}/s out={:.1f}/s "
          "empty_in={}{}\n",
          at, s.name, s.visible, s.in_flight, s.delayed, s.dead, short_duration(s.oldest_age),
          r.in_per_s, r.out_per_s, empty ? short_duration(empty) : "never",
          s.pause ? " paused" : "");
    }
    if (!write_stdout(lines)) {
      ctx.exit = kIoErr;
      return;
    }
  }
}

void run_stats(const StatsFlags& f, Context& ctx) {
  if (f.watch) {
    q::Millis interval = duration_flag("--interval", f.interval).value_or(q::kSecond);
    if (interval < 100) throw q::Error(q::ErrorKind::Usage, "--interval: at least 100ms");
    watch(f, ctx, interval);
    return;
  }
  auto all = ctx.open_for_reading()->stats(f.queue);
  if (f.prometheus) {
    if (f.output)
      write_atomically(*f.output, prometheus(all, q::redact_location(ctx.queue_file())));
    else
      ctx.out += prometheus(all, q::redact_location(ctx.queue_file()));
    return;
  }
  if (f.json) {
    for (const auto& s : all) ctx.out += stats_json(s);
    return;
  }
  ctx.out += stats_table(all, !f.queue.empty());
}

}  // namespace

void add_stats(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<StatsFlags>();
  if (!ctx.wants("stats")) return;
  auto* cmd =
      app.add_subcommand("stats",
                         "Show every queue (or one): visible, in flight, delayed, dead, age of the "
                         "oldest message, and lifetime counters");
  cmd->add_option("QUEUE", f->queue, "Only this queue");
  auto* json = cmd->add_flag("--json", f->json, "One JSON object a line per queue");
  auto* prom = cmd->add_flag("--prometheus", f->prometheus,
                             "Prometheus text format (node_exporter textfile collector)");
  cmd->add_option("--output", f->output,
                  "With --prometheus: write FILE atomically (temp file + rename)")
      ->type_name("FILE")
      ->needs(prom);
  auto* watch = cmd->add_flag("--watch", f->watch,
                              "Print a line per queue every --interval: counts, in and out "
                              "rates, time to empty; until interrupted");
  cmd->add_option("--interval", f->interval, "With --watch: how often (default 1s)")
      ->type_name("DUR")
      ->needs(watch);
  json->excludes(prom)->excludes(watch);
  prom->excludes(watch);
  cmd->callback([f, &ctx] { run_stats(*f, ctx); });
}

}  // namespace cli
