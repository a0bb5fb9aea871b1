// q check [QUEUE] --max-dead --max-age --max-depth --min-rate, or -w/-c RANGE
// on one --metric: a monitoring plugin (Nagios, Icinga, a cron job or systemd
// timer): one status line with perfdata, exit 0 OK, 1 WARNING, 2 CRITICAL,
// 3 UNKNOWN.
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/error.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"
#include "cli/plugin_range.hpp"
#include "cli/work/rates.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

enum Status { kOkStatus = 0, kWarning = 1, kCritical = 2, kUnknown = 3 };
const char* kStatusName[] = {"OK", "WARNING", "CRITICAL", "UNKNOWN"};

struct CheckFlags {
  std::string queue;
  std::optional<std::string> max_dead, max_age, max_depth, min_rate, sample, timeout;
  std::optional<std::string> warn_range, crit_range;  // -w, -c
  std::string metric = "depth";                       // what -w/-c judge
};

// The values -w/-c can judge: the perfdata labels, in their units.
const char* const kMetrics[] = {"depth", "dead", "oldest_age", "out_rate"};

// -w/-c RANGE on --metric: the plugin range syntax (plugin_range.hpp).
struct RangeCheck {
  std::string metric;
  std::optional<PluginRange> warn, crit;

  std::string perf() const { return (warn ? warn->text : "") + ";" + (crit ? crit->text : ""); }
};

// -t/--timeout: a plugin that hangs (a lock held, a slow disk) must still
// answer: UNKNOWN on stdout, exit 3, as monitoring plugins do.
constexpr q::Millis kDefaultTimeout = 10 * q::kSecond;
volatile sig_atomic_t g_timeout_seconds = 0;

void on_timeout(int) {
  char line[96];
  int n = std::snprintf(line, sizeof line, "Q UNKNOWN - timed out after %ds (-t/--timeout)\n",
                        static_cast<int>(g_timeout_seconds));
  if (n > 0) [[maybe_unused]]
    auto w = ::write(STDOUT_FILENO, line, static_cast<std::size_t>(n));
  ::_exit(3);
}

void arm_timeout(q::Millis timeout) {
  g_timeout_seconds = static_cast<int>((timeout + 999) / 1000);
  struct sigaction sa {};
  sa.sa_handler = on_timeout;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  itimerval t{};
  t.it_value.tv_sec = timeout / 1000;
  t.it_value.tv_usec = static_cast<suseconds_t>((timeout % 1000) * 1000);
  setitimer(ITIMER_REAL, &t, nullptr);
}

// "CRIT" or "WARN,CRIT", each read by `parse`.
struct Threshold {
  std::optional<double> warn, crit;
  // Perfdata "warn;crit" in the plugin range syntax: a minimum is "10:"
  // (alert below 10), a maximum plain "10" (alert above 10).
  std::string text(bool minimum = false) const {
    auto one = [minimum](const std::optional<double>& v) {
      return v ? fmt::format("{}{}", *v, minimum ? ":" : "") : "";
    };
    return one(warn) + ";" + one(crit);
  }
};

// `lower_bound`: the thresholds are minimums (--min-rate), so the warning
// comes before the critical one from above. A warning past the critical
// threshold could never show and is refused.
template <typename Parse>
std::optional<Threshold> threshold(const std::string& flag, const std::optional<std::string>& text,
                                   Parse parse, bool lower_bound = false) {
  if (!text) return std::nullopt;
  Threshold t;
  auto comma = text->find(',');
  if (comma == std::string::npos) {
    t.crit = parse(flag, *text);
  } else {
    t.warn = parse(flag, text->substr(0, comma));
    t.crit = parse(flag, text->substr(comma + 1));
    if (lower_bound ? *t.warn < *t.crit : *t.warn > *t.crit)
      throw q::Error(q::ErrorKind::Usage,
                     fmt::format("{} '{}': the warning threshold must be {} the critical one "
                                 "(W,C)",
                                 flag, *text, lower_bound ? "at or above" : "at or below"));
  }
  return t;
}

// --sample: a monitoring check must finish, and a rate needs some time.
constexpr q::Millis kMinSample = 10;
constexpr q::Millis kMaxSample = 10 * q::kMinute;

q::Millis sample_flag(const std::optional<std::string>& text) {
  q::Millis sample = duration_flag("--sample", text).value_or(2 * q::kSecond);
  if (sample < kMinSample || sample > kMaxSample)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("--sample '{}': must be between {} and {}", *text,
                               q::format_duration(kMinSample), q::format_duration(kMaxSample)));
  return sample;
}

// The status line stays short whatever the number of queues (10,000 queues
// made a 650 KB line): the first few items, then how many more.
constexpr std::size_t kShownItems = 5;

std::string summarise(const std::vector<std::string>& items, const char* noun) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < kShownItems; ++i)
    out += (i ? "; " : "") + items[i];
  if (items.size() > kShownItems)
    out +=
        fmt::format("; and {}", q::plural(items.size() - kShownItems, std::string("more ") + noun));
  return out;
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
  std::vector<std::string> criticals, warnings;
  std::string perfdata;

  // Critical problems first: they must not be among those summarised away.
  std::vector<std::string> problems() const {
    auto all = criticals;
    all.insert(all.end(), warnings.begin(), warnings.end());
    return all;
  }

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
    (s == kCritical ? criticals : warnings)
        .push_back(
            fmt::format("{} {} ({} {:g}{})", what, shown, below ? "min" : "max", limit, unit));
  }

  // -c first: a value in both alerts is critical.
  void judge_range(const std::string& what, double value, const RangeCheck& r,
                   const std::string& shown) {
    const char* flag = nullptr;
    const PluginRange* range = nullptr;
    if (r.crit && r.crit->alerts(value)) {
      flag = "-c";
      range = &*r.crit;
    } else if (r.warn && r.warn->alerts(value)) {
      flag = "-w";
      range = &*r.warn;
    }
    if (!range) return;
    Status s = flag[1] == 'c' ? kCritical : kWarning;
    status = std::max(status, s);
    (s == kCritical ? criticals : warnings)
        .push_back(fmt::format("{} {} ({} {} {})", what, shown, range->inside ? "in" : "outside",
                               flag, range->text));
  }
};

std::optional<RangeCheck> range_check(const CheckFlags& f) {
  if (!f.warn_range && !f.crit_range) {
    if (f.metric != "depth")
      throw q::Error(q::ErrorKind::Usage,
                     fmt::format("--metric {}: give -w or -c RANGE to judge it", f.metric));
    return std::nullopt;
  }
  RangeCheck r;
  r.metric = f.metric;
  if (std::find(std::begin(kMetrics), std::end(kMetrics), f.metric) == std::end(kMetrics))
    throw q::Error(
        q::ErrorKind::Usage,
        fmt::format("--metric '{}': not one of depth, dead, oldest_age, out_rate", f.metric));
  if (f.warn_range) r.warn = parse_plugin_range("-w", *f.warn_range);
  if (f.crit_range) r.crit = parse_plugin_range("-c", *f.crit_range);
  const std::optional<std::string>* same = f.metric == "depth"        ? &f.max_depth
                                           : f.metric == "dead"       ? &f.max_dead
                                           : f.metric == "oldest_age" ? &f.max_age
                                                                      : &f.min_rate;
  const char* flag = f.metric == "depth"        ? "--max-depth"
                     : f.metric == "dead"       ? "--max-dead"
                     : f.metric == "oldest_age" ? "--max-age"
                                                : "--min-rate";
  if (*same)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("-w/-c and {} both judge {}: give one of them", flag, f.metric));
  return r;
}

void run_check(const CheckFlags& f, Context& ctx) {
  Verdict v;
  std::vector<QueueRates> queues;
  try {
    auto max_dead = threshold("--max-dead", f.max_dead, count_value);
    auto max_depth = threshold("--max-depth", f.max_depth, count_value);
    auto max_age = threshold("--max-age", f.max_age, seconds_value);
    auto min_rate = threshold("--min-rate", f.min_rate, rate_flag, /*lower_bound=*/true);
    auto ranges = range_check(f);
    bool rated = min_rate || (ranges && ranges->metric == "out_rate");
    q::Millis sample = sample_flag(f.sample);
    q::Millis timeout = duration_flag("-t/--timeout", f.timeout).value_or(kDefaultTimeout);
    if (timeout < q::kSecond || timeout > kMaxSample + q::kMinute)
      throw q::Error(
          q::ErrorKind::Usage,
          fmt::format("-t/--timeout '{}': must be between 1s and 11m", f.timeout.value_or("")));
    if (rated && sample >= timeout)
      throw q::Error(q::ErrorKind::Usage,
                     fmt::format("--sample {} must be shorter than -t/--timeout {}",
                                 q::format_duration(sample), q::format_duration(timeout)));
    arm_timeout(timeout);

    auto broker = ctx.open_for_reading();
    RateMeter meter;
    queues = meter.sample(*broker, f.queue);
    if (rated) {
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
      // A paused queue delivers nothing: someone should know, not be woken.
      if (s.pause) {
        v.status = std::max(v.status, kWarning);
        std::string until = s.pause->until ? "until " + q::format_time(s.pause->until)
                                           : std::string("until 'q resume'");
        // Escaped as stats does: a newline would split the one status line,
        // and control characters must not reach a terminal.
        v.warnings.push_back(
            fmt::format("{}: paused {}{}", s.name, until,
                        s.pause->reason.empty() ? "" : ": " + text_escape(s.pause->reason)));
      }
      // A queue with nothing to do is not too slow.
      if (r.backlog() > 0)
        v.judge(s.name + ": drain rate", r.out_per_s, min_rate,
                fmt::format("{:.2f}/s", r.out_per_s), "/s", /*below=*/true);
      if (ranges) {
        const auto& m = ranges->metric;
        if (m == "depth")
          v.judge_range(s.name + ": depth", static_cast<double>(r.backlog()), *ranges,
                        std::to_string(r.backlog()));
        else if (m == "dead")
          v.judge_range(s.name + ": dead letters", static_cast<double>(s.dead), *ranges,
                        std::to_string(s.dead));
        else if (m == "oldest_age")
          v.judge_range(s.name + ": oldest message", age, *ranges, fmt::format("{:.3f}s", age));
        else if (r.backlog() > 0)  // as --min-rate: an idle queue is not slow
          v.judge_range(s.name + ": drain rate", r.out_per_s, *ranges,
                        fmt::format("{:.2f}/s", r.out_per_s));
      }
      auto perf = [&](const std::string& label, const std::string& value,
                      const std::optional<Threshold>& t, bool minimum = false) {
        std::string limits = ranges && ranges->metric == label ? ranges->perf()
                             : t                               ? t->text(minimum)
                                                               : std::string(";");
        v.perfdata += fmt::format(" '{}_{}'={};{};0", s.name, label, value, limits);
      };
      perf("dead", std::to_string(s.dead), max_dead);
      perf("oldest_age", fmt::format("{:.3f}s", age), max_age);
      perf("depth", std::to_string(r.backlog()), max_depth);
      if (rated) perf("out_rate", fmt::format("{:.3f}", r.out_per_s), min_rate, /*minimum=*/true);
    }
  } catch (const q::Error& e) {
    ctx.out += fmt::format("Q UNKNOWN - {}\n", error_text(e));
    ctx.exit = kUnknown;
    return;
  }
  std::string summary;
  if (v.status == kOkStatus) {
    std::vector<std::string> numbers;
    for (const auto& r : queues)
      numbers.push_back(fmt::format("{}: depth {}, dead {}, oldest {}", r.stats.name, r.backlog(),
                                    r.stats.dead, short_duration(r.stats.oldest_age)));
    summary = summarise(numbers, "queue");
  } else {
    summary = summarise(v.problems(), "problem");
  }
  ctx.out += fmt::format("Q {} - {} |{}\n", kStatusName[v.status], summary, v.perfdata);
  ctx.exit = v.status;
}

}  // namespace

void add_check(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<CheckFlags>();
  if (!ctx.wants("check")) return;
  auto* cmd = app.add_subcommand(
      "check",
      "Check queue health for monitoring: one status line with perfdata; exit 0 OK, "
      "1 WARNING, 2 CRITICAL, 3 UNKNOWN (any error, usage errors included, on "
      "stdout). Thresholds are CRIT or WARN,CRIT; -w/-c take the monitoring-plugins "
      "ranges (N, N:, ~:N, N:M, @N:M) and judge --metric");
  cmd->add_option("QUEUE", f->queue, "Only this queue (default: every queue)");
  cmd->add_option("--max-dead", f->max_dead, "Dead letters above this are bad, like 0 or 0,10")
      ->type_name("[W,]C");
  cmd->add_option("--max-age", f->max_age,
                  "Oldest message older than this is bad, like 5m or 1m,5m")
      ->type_name("[W,]C");
  cmd->add_option("--max-depth", f->max_depth, "More waiting messages than this is bad")
      ->type_name("[W,]C");
  cmd->add_option("--min-rate", f->min_rate,
                  "Draining slower than this while messages wait is bad, like 10/s (measured "
                  "over --sample)")
      ->type_name("[W,]C");
  cmd->add_option("-w,--warning", f->warn_range,
                  "WARNING when --metric is outside RANGE (inside with @): 10 (0..10), 10: (at "
                  "least 10), ~:10 (at most 10), 10:20, @10:20")
      ->type_name("RANGE");
  cmd->add_option("-c,--critical", f->crit_range,
                  "CRITICAL when --metric is outside RANGE (inside with @); as -w")
      ->type_name("RANGE");
  cmd->add_option("--metric", f->metric,
                  "What -w/-c judge, per queue: depth (default; visible, in flight and "
                  "delayed), dead, oldest_age (seconds), out_rate (per second over --sample)")
      ->type_name("NAME");
  cmd->add_option("--sample", f->sample, "How long --min-rate measures (default 2s)")
      ->type_name("DUR");
  cmd->add_option("-t,--timeout", f->timeout,
                  "Give up with UNKNOWN after this long (default 10s; 1s to 11m)")
      ->type_name("DUR");
  cmd->set_version_flag("-V,--version", fmt::format("q check {}", Q_VERSION),
                        "Print the version and exit");
  cmd->callback([f, &ctx] { run_check(*f, ctx); });
}

}  // namespace cli
