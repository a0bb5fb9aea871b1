// q redrive QUEUE [--id ID]... [--reason REGEX] [--since DUR] [--max N]
//                 [--rate N/s] [--to QUEUE] [--dry-run]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/dead_filter.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"
#include "cli/work/stop_signals.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct RedriveFlags {
  std::string queue, to;
  std::vector<std::string> ids;
  std::optional<std::uint64_t> max;
  std::optional<std::string> rate;
  bool dry_run = false, json = false;
  DeadFilterFlags filter;
};

// On a terminal: how far a trickle is, its rate and when it will be done.
class Trickle {
 public:
  Trickle(std::string queue, std::size_t total, bool terminal)
      : queue_(std::move(queue)),
        total_(total),
        terminal_(terminal),
        start_(std::chrono::steady_clock::now()) {}

  void show(std::size_t done, std::size_t moved) {
    if (!terminal_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(250) && done < total_) return;
    last_ = now;
    double seconds = std::chrono::duration<double>(now - start_).count();
    double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
    std::string eta =
        rate > 0 ? q::format_duration(
                       static_cast<q::Millis>(static_cast<double>(total_ - done) / rate * 1000) /
                       1000 * 1000)
                 : "-";
    write(fmt::format("\r\033[Kq redrive {}: moved {} of {} | {:.1f}/s | done in {}", queue_, moved,
                      total_, rate, eta));
    shown_ = true;
  }
  void clear() {
    if (shown_) write("\r\033[K");
    shown_ = false;
  }

 private:
  static void write(const std::string& text) {
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, text.data(), text.size());
  }
  std::string queue_;
  std::size_t total_;
  bool terminal_, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
};

void run_redrive(const RedriveFlags& f, Context& ctx) {
  DeadFilter filter(f.filter);
  double rate = f.rate ? rate_flag("--rate", *f.rate) : 0;
  if (f.rate && rate <= 0) throw q::Error(q::ErrorKind::Usage, "--rate: must be above 0");
  auto broker = ctx.open();
  q::RedriveOptions options;
  options.ids = f.ids;
  options.max = f.max;
  options.dry_run = f.dry_run;
  options.to = f.to;
  auto print = [&](const std::vector<q::Message>& moved) {
    std::string out;
    for (const auto& m : moved)
      out += f.json ? message_json(m, false) : (f.dry_run ? "would redrive " : "") + m.id + "\n";
    return out;
  };
  // Like grep: nothing matched is exit 1, said on stderr.
  auto none = [&] {
    print_error(fmt::format("no dead letters of {} {}; nothing was redriven", f.queue,
                            filter.active() || !f.ids.empty() ? "matched" : "to move"));
    ctx.exit = kEmpty;
  };
  auto summary = [&](std::size_t n) {
    print_error(fmt::format("{} {} of {}{}", f.dry_run ? "would redrive" : "redrove",
                            q::plural(n, "dead letter"), f.queue,
                            f.to.empty() || f.to == f.queue ? "" : " to " + f.to));
  };

  if (filter.active()) {
    // Choose the dead letters here, then move exactly those.
    q::Millis now = ctx.clock().now();
    std::vector<std::string> chosen;
    broker->each_dead_letter(f.queue, [&](const q::Message& m) {
      if (f.max && chosen.size() >= *f.max) return false;
      if (!f.ids.empty() && std::find(f.ids.begin(), f.ids.end(), m.id) == f.ids.end()) return true;
      if (filter.matches(m, now)) chosen.push_back(m.id);
      return true;
    });
    if (chosen.empty()) return none();
    options.ids = chosen;
    options.max.reset();
  }
  if (rate <= 0 || f.dry_run) {
    auto moved = broker->redrive(f.queue, options);
    if (moved.empty()) return none();
    ctx.out += print(moved);
    summary(moved.size());
    return;
  }
  // Trickle: a small batch every tenth of a second, printed as it goes, so a
  // downstream that just recovered is not flooded.
  if (options.ids.empty()) {
    broker->each_dead_letter(f.queue, [&](const q::Message& m) {
      if (f.max && options.ids.size() >= *f.max) return false;
      options.ids.push_back(m.id);
      return true;
    });
    options.max.reset();
  }
  if (options.ids.empty()) return none();
  const std::size_t per_tick = std::max<std::size_t>(1, static_cast<std::size_t>(rate / 10));
  const auto tick = std::chrono::microseconds(static_cast<long long>(1e6 * per_tick / rate));
  auto next = std::chrono::steady_clock::now();
  std::size_t moved = 0;
  const std::size_t total = options.ids.size();
  // A trickle takes long: Ctrl-C or a service stop ends it between batches,
  // saying how far it got (exit 4, partial).
  install_stop_signals({SIGINT, SIGTERM});
  Trickle progress(f.queue, total, isatty(STDERR_FILENO) != 0);
  for (std::size_t i = 0; i < options.ids.size(); i += per_tick) {
    std::this_thread::sleep_until(next);
    next += tick;
    if (stop_signals()) {
      progress.clear();
      std::fprintf(stderr, "q redrive: stopped: redrove %zu of %zu dead letters of %s; %zu left\n",
                   moved, total, f.queue.c_str(), total - moved);
      ctx.exit = kPartial;
      return;
    }
    q::RedriveOptions batch = options;
    // Chosen before the trickle began: one redriven, deleted or expired
    // since is passed over, not a reason to stop.
    batch.skip_missing = true;
    batch.ids.assign(options.ids.begin() + i,
                     options.ids.begin() + std::min(options.ids.size(), i + per_tick));
    std::vector<q::Message> done;
    try {
      done = broker->redrive(f.queue, batch);
    } catch (const q::Error& e) {
      if (moved == 0) throw;
      // Some moved already: say how many, and exit "partly done".
      std::fprintf(
          stderr, "q redrive: %s\nq redrive: redrive stopped after %zu of %zu dead letters of %s\n",
          error_text(e).c_str(), moved, options.ids.size(), f.queue.c_str());
      ctx.exit = kPartial;
      return;
    }
    moved += done.size();
    if (!write_stdout(print(done))) {
      ctx.exit = kIoErr;
      return;
    }
    progress.show(std::min(total, i + per_tick), moved);
  }
  progress.clear();
  std::fprintf(stderr, "q redrive: redrove %zu of %zu dead letters of %s\n", moved,
               options.ids.size(), f.queue.c_str());
}

}  // namespace

void add_redrive(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<RedriveFlags>();
  if (!ctx.wants("redrive")) return;
  auto* cmd = app.add_subcommand(
      "redrive",
      "Move dead letters back into their queue (or --to another), oldest first, once "
      "the bug is fixed; each keeps its id and starts again at receive count 0. "
      "Prints the ids moved");
  cmd->add_option("QUEUE", f->queue, "Queue whose dead letters move")->required();
  cmd->add_option("--id", f->ids, "Move only this dead letter (repeatable)")
      ->type_name("ID")
      ->allow_extra_args(false);
  add_dead_filter_flags(cmd, f->filter);
  cmd->add_option("-n,--max", f->max, "Move at most N")->type_name("N");
  cmd->add_option("--rate", f->rate,
                  "Trickle them back at N per second instead of all at once, like 5/s")
      ->type_name("N/s");
  cmd->add_option("--to", f->to, "Move them to this queue instead")->type_name("QUEUE");
  cmd->add_flag("--dry-run", f->dry_run, "Print what would move, move nothing");
  cmd->add_flag("--json", f->json, "One JSON object a line per dead letter");
  cmd->callback([f, &ctx] { run_redrive(*f, ctx); });
}

}  // namespace cli
