// q check [QUEUE] --max-dead --max-age --max-depth --min-rate: a monitoring
// plugin (Nagios, Icinga, a cron job or systemd timer): one status line with
// perfdata, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
#include <chrono>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "context.hpp"
#include "error.hpp"
#include "input.hpp"
#include "rates.hpp"

namespace cli {
namespace {

enum Status { kOkStatus = 0, kWarning = 1, kCritical = 2, kUnknown = 3 };
const char* kStatusName[] = {"OK", "WARNING", "CRITICAL", "UNKNOWN"};

struct CheckFlags {
  std::string queue;
  std::optional<std::string> max_dead, max_age, max_depth, min_rate, sample;
};

// "CRIT" or "WARN,CRIT", each read by `parse`.
struct Threshold {
  std::optional<double> warn, crit;
  std::string text() const {
    auto one = [](const std::optional<double>& v) { return v ? fmt::format("{}", *v) : ""; };
    return one(warn) + ";" + one(crit);
  }
};

template <typename Parse>
std::optional<Threshold> threshold(const std::string& flag, const std::optional<std::string>& text,
                                   Parse parse) {
  if (!text) return std::nullopt;
  Threshold t;
  auto comma = text->find(',');
  if (comma == std::string::npos) {
    t.crit = parse(flag, *text);
  } else {
    t.warn = parse(flag, text->substr(0, comma));
    t.crit = parse(flag, text->substr(comma + 1));
  }
  return t;
}

double count_value(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw q::Error(q::ErrorKind::Usage, fmt::format("{} '{}': not a count", flag, text));
}

double seconds_value(const std::string& flag, const std::string& text) {
  return static_cast<double>(duration_flag(flag, text)) / 1000.0;
}

struct Verdict {
  Status status = kOkStatus;
  std::vector<std::string> problems;
  std::string perfdata;

  // Above the threshold is bad (or below, with `below`).
  void judge(const std::string& what, double value, const std::optional<Threshold>& t,
             const std::string& shown, const char* unit, bool below = false) {
    if (!t) return;
    auto beyond = [&](const std::optional<double>& limit) {
      return limit && (below ? value < *limit : value > *limit);
    };
    Status s = beyond(t->crit) ? kCritical : beyond(t->warn) ? kWarning : kOkStatus;
    if (s == kOkStatus) return;
    status = std::max(status, s);
    double limit = s == kCritical ? *t->crit : *t->warn;
    problems.push_back(fmt::format("{} {} ({} {:g}{})", what, shown, below ? "min" : "max", limit, unit));
  }
};

void run_check(const CheckFlags& f, Context& ctx) {
  Verdict v;
  std::vector<QueueRates> queues;
  try {
    auto max_dead = threshold("--max-dead", f.max_dead, count_value);
    auto max_depth = threshold("--max-depth", f.max_depth, count_value);
    auto max_age = threshold("--max-age", f.max_age, seconds_value);
    auto min_rate = threshold("--min-rate", f.min_rate, rate_flag);
    q::Millis sample = duration_flag("--sample", f.sample).value_or(2 * q::kSecond);

    auto broker = ctx.open();
    RateMeter meter;
    queues = meter.sample(*broker, f.queue);
    if (min_rate) {
      // A rate needs two snapshots.
      std::this_thread::sleep_for(std::chrono::milliseconds(sample));
      queues = meter.sample(*broker, f.queue);
    }
    if (queues.empty()) throw q::Error(q::ErrorKind::NotFound, "the file has no queues");
    for (const auto& r : queues) {
      const auto& s = r.stats;
      double age = static_cast<double>(s.oldest_age.value_or(0)) / 1000.0;
      v.judge(s.name + ": dead letters", static_cast<double>(s.dead), max_dead,
              std::to_string(s.dead), "");
      v.judge(s.name + ": oldest message", age, max_age, short_duration(s.oldest_age), "s");
      v.judge(s.name + ": depth", static_cast<double>(r.backlog()), max_depth,
              std::to_string(r.backlog()), "");
      // A queue with nothing to do is not too slow.
      if (r.backlog() > 0)
        v.judge(s.name + ": drain rate", r.out_per_s, min_rate,
                fmt::format("{:.2f}/s", r.out_per_s), "/s", /*below=*/true);
      auto perf = [&](const std::string& label, const std::string& value,
                      const std::optional<Threshold>& t) {
        v.perfdata += fmt::format(" '{}_{}'={};{};0", s.name, label, value,
                                  t ? t->text() : std::string(";"));
      };
      perf("dead", std::to_string(s.dead), max_dead);
      perf("oldest_age", fmt::format("{:.3f}s", age), max_age);
      perf("depth", std::to_string(r.backlog()), max_depth);
      if (min_rate) perf("out_rate", fmt::format("{:.3f}", r.out_per_s), min_rate);
    }
  } catch (const q::Error& e) {
    ctx.out += fmt::format("Q UNKNOWN - {}\n", e.what());
    ctx.exit = kUnknown;
    return;
  }
  std::string summary;
  if (v.problems.empty()) {
    for (const auto& r : queues)
      summary += fmt::format("{}{}: depth {}, dead {}, oldest {}", summary.empty() ? "" : "; ",
                             r.stats.name, r.backlog(), r.stats.dead,
                             short_duration(r.stats.oldest_age));
  } else {
    for (const auto& p : v.problems) summary += (summary.empty() ? "" : "; ") + p;
  }
  ctx.out += fmt::format("Q {} - {} |{}\n", kStatusName[v.status], summary, v.perfdata);
  ctx.exit = v.status;
}

}  // namespace

void add_check(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<CheckFlags>();
  if (!ctx.wants("check")) return;
  auto* cmd = app.add_subcommand(
      "check", "Check queue health for monitoring: one status line with perfdata; exit 0 OK, "
               "1 WARNING, 2 CRITICAL, 3 UNKNOWN. Thresholds are CRIT or WARN,CRIT");
  cmd->add_option("QUEUE", f->queue, "Only this queue (default: every queue)");
  cmd->add_option("--max-dead", f->max_dead, "Dead letters above this are bad, like 0 or 0,10")
      ->type_name("[W,]C");
  cmd->add_option("--max-age", f->max_age, "Oldest message older than this is bad, like 5m or 1m,5m")
      ->type_name("[W,]C");
  cmd->add_option("--max-depth", f->max_depth, "More waiting messages than this is bad")
      ->type_name("[W,]C");
  cmd->add_option("--min-rate", f->min_rate,
                  "Draining slower than this while messages wait is bad, like 10/s (measured "
                  "over --sample)")
      ->type_name("[W,]C");
  cmd->add_option("--sample", f->sample, "How long --min-rate measures (default 2s)")
      ->type_name("DUR");
  cmd->callback([f, &ctx] { run_check(*f, ctx); });
}

}  // namespace cli
