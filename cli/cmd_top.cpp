// q top: a full-screen live view of every queue, refreshed every second.
// Rates come from the counters in the file, so they include every process.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/error.hpp"
#include "libq/files.hpp"
#include "cli/work/stop_signals.hpp"
#include "cli/input.hpp"
#include "libq/location.hpp"
#include "cli/output.hpp"
#include "cli/work/rates.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct TopFlags {
  std::string queue;
  std::optional<std::string> interval;
};

// A key or a lost terminal quits; so does a stop signal (work/stop_signals.hpp).
bool g_quit = false;
bool quitting() { return g_quit || stop_signals() > 0; }

// Puts the terminal into a full-screen, key-at-a-time mode and always puts it
// back, whatever ends the view.
class Screen {
 public:
  Screen() {
    if (tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_termios_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    put("\033[?1049h\033[?25l");  // alternate screen, hide the cursor
  }
  ~Screen() {
    put("\033[?25h\033[?1049l");
    if (restore_termios_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  static void put(const std::string& s) { q::files::write_all(STDOUT_FILENO, s); }
  static std::pair<int, int> size() {
    winsize ws{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return {ws.ws_col, ws.ws_row};
    return {80, 24};
  }

 private:
  termios saved_{};
  bool restore_termios_ = false;
};

std::string sparkline(const std::deque<std::uint64_t>& history, std::size_t width) {
  static const char* bars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  // At least 8 to a full bar: a steady depth of 1 is a low bar, not a full
  // one; an empty queue shows nothing.
  std::uint64_t top = 8;
  for (auto v : history) top = std::max(top, v);
  std::string out;
  std::size_t start = history.size() > width ? history.size() - width : 0;
  for (std::size_t i = start; i < history.size(); ++i) {
    if (history[i] == 0) {
      out += " ";
      continue;
    }
    out += bars[static_cast<std::size_t>(history[i] * 7 / top)];
  }
  for (std::size_t i = history.size() - start; i < width; ++i) out += " ";
  return out;
}

std::string rate_text(double r) {
  if (r >= 10000) return fmt::format("{:.0f}k", r / 1000);
  if (r >= 100) return fmt::format("{:.0f}", r);
  return fmt::format("{:.1f}", r);
}

std::string count_text(std::uint64_t n) {
  if (n >= 10'000'000) return fmt::format("{}M", n / 1'000'000);
  if (n >= 100'000) return fmt::format("{}k", n / 1000);
  return std::to_string(n);
}

// Cuts to `width` bytes, never inside a character.
std::string fit(std::string s, std::size_t width) {
  if (s.size() > width) s = std::string(q::utf8_prefix(s, width - 1)) + "~";
  return s;
}

// Column widths of the table: full column names, figures right-aligned, the
// queue column as wide as the longest name when the terminal allows, the depth
// sparkline taking what is left (at least kMinSpark, at most 60).
struct TopLayout {
  static constexpr std::size_t kVisible = 7, kInFlight = 9, kDelayed = 7, kDead = 5, kRate = 6,
                               kOldest = 7, kToEmpty = 8, kMinName = 5, kMinSpark = 6,
                               kMaxSpark = 60;
  // Everything but the queue name and the sparkline, separators included.
  static constexpr std::size_t kFixed =
      kVisible + kInFlight + kDelayed + kDead + 2 * kRate + kOldest + kToEmpty + 10;

  std::size_t name = kMinName;
  std::size_t spark = kMinSpark;

  template <typename Queues>
  static TopLayout fit(const Queues& queues, std::size_t cols) {
    TopLayout l;
    std::size_t longest = kMinName;
    for (const auto& r : queues) longest = std::max(longest, r.stats.name.size());
    std::size_t room = cols > kFixed + kMinSpark ? cols - kFixed - kMinSpark : 0;
    l.name = std::max(kMinName, std::min(longest, room));
    std::size_t left = cols > kFixed + l.name ? cols - kFixed - l.name : 0;
    l.spark = std::clamp(left, kMinSpark, kMaxSpark);
    return l;
  }

  // `dead` comes padded (it may carry colour codes, which a width would count).
  std::string row(const std::string& queue, const std::string& visible,
                  const std::string& in_flight, const std::string& delayed, const std::string& dead,
                  const std::string& in, const std::string& out, const std::string& spark_text,
                  const std::string& oldest, const std::string& to_empty) const {
    return fmt::format("{:<{}} {:>{}} {:>{}} {:>{}} {:>{}} {:>{}} {:>{}}  {} {:>{}} {:>{}}", queue,
                       name, visible, kVisible, in_flight, kInFlight, delayed, kDelayed, dead,
                       kDead, in, kRate, out, kRate, spark_text, oldest, kOldest, to_empty,
                       kToEmpty);
  }
};

// Waits for the next refresh, or a key that quits. `keys` is cleared when the
// keyboard can no longer be read: with standard input at end of file (q top <
// /dev/null) poll says "readable" for ever and read returns 0, which spun the
// loop at full speed (issue 17).
void wait_for_refresh_or_key(q::Millis interval, bool& keys) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval);
  while (!quitting()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, keys ? 1 : 0, static_cast<int>(left)) <= 0) continue;  // timeout or signal
    if (p.revents & (POLLHUP | POLLERR)) {                                // the terminal went away
      g_quit = true;
      return;
    }
    if (p.revents & POLLNVAL) {
      keys = false;
      continue;
    }
    char key = 0;
    ssize_t n = ::read(STDIN_FILENO, &key, 1);
    if (n == 1 && (key == 'q' || key == 'Q' || key == 3)) g_quit = true;
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) keys = false;
  }
}

void run_top(const TopFlags& f, Context& ctx) {
  if (!isatty(STDOUT_FILENO))
    throw q::Error(q::ErrorKind::Usage,
                   "standard output is not a terminal (for logs, use 'q stats --watch')");
  q::Millis interval = duration_flag("--interval", f.interval).value_or(q::kSecond);
  if (interval < 100) throw q::Error(q::ErrorKind::Usage, "--interval: at least 100ms");
  const bool color = std::getenv("NO_COLOR") == nullptr;
  // Keys are read from a terminal only: anything else on standard input (a
  // file, /dev/null, a closed descriptor that the queue file may now reuse) is
  // not a keyboard. Ctrl-C and SIGTERM still quit.
  bool keys = isatty(STDIN_FILENO) == 1;
  auto broker = ctx.open_for_reading();
  std::string file = text_escape(q::redact_location(ctx.queue_file()));

  install_stop_signals({SIGINT, SIGTERM, SIGHUP});
  Screen screen;
  RateMeter meter;
  std::map<std::string, std::deque<std::uint64_t>> depth_history;
  const std::size_t kHistory = 300;  // five minutes at one a second

  while (!quitting()) {
    auto queues = meter.sample(*broker, f.queue);
    auto [cols, rows] = Screen::size();
    const auto layout = TopLayout::fit(queues, static_cast<std::size_t>(cols));
    std::string frame = "\033[H\033[2J";
    auto bold = [&](const std::string& s) { return color ? "\033[1m" + s + "\033[0m" : s; };
    auto red = [&](const std::string& s) { return color ? "\033[31m" + s + "\033[0m" : s; };
    std::string now = q::format_time(q::SystemClock().now()).substr(11, 8);
    frame += bold(fit(fmt::format("q top  {}  {}  ({})  q: quit", now, file,
                                  q::plural(queues.size(), "queue")),
                      static_cast<std::size_t>(cols))) +
             "\r\n\r\n";
    std::string header =
        layout.row("QUEUE", "VISIBLE", "IN FLIGHT", "DELAYED", "DEAD", "IN/s", "OUT/s",
                   fmt::format("{:<{}}", "DEPTH", layout.spark), "OLDEST", "TO EMPTY");
    frame += (color ? "\033[7m" + header + "\033[0m" : header) + "\r\n";
    int line = 4;
    for (const auto& r : queues) {
      if (line >= rows) break;
      const auto& s = r.stats;
      auto& history = depth_history[s.name];
      history.push_back(r.backlog());
      if (history.size() > kHistory) history.pop_front();
      auto empty = r.time_to_empty();
      // A name too long for its column gets a line of its own, whole, rather
      // than being cut mid-word; its figures follow on the next line.
      std::string name = s.name;
      if (name.size() > layout.name) {
        frame += fit(name, static_cast<std::size_t>(cols)) + "\r\n";
        name.clear();
        if (++line >= rows) break;
      }
      std::string dead = fmt::format("{:>{}}", count_text(s.dead), TopLayout::kDead);
      frame +=
          layout.row(name, count_text(s.visible), count_text(s.in_flight), count_text(s.delayed),
                     s.dead > 0 ? red(dead) : dead, r.measured ? rate_text(r.in_per_s) : "-",
                     r.measured ? rate_text(r.out_per_s) : "-", sparkline(history, layout.spark),
                     short_duration(s.oldest_age),
                     // An idle empty queue has nothing to empty: "-".
                     s.pause                           ? "paused"
                     : !r.measured || r.backlog() == 0 ? "-"
                     : empty                           ? short_duration(empty)
                                                       : "never") +
          "\r\n";
      ++line;
    }
    // Pauses, with their end and reason, below the table.
    for (const auto& r : queues) {
      const auto& s = r.stats;
      if (!s.pause || line >= rows) continue;
      std::string until = s.pause->until ? "until " + q::format_time(s.pause->until)
                                         : std::string("until 'q resume'");
      std::string text =
          fmt::format("{} paused {}{}", s.name, until,
                      s.pause->reason.empty() ? "" : ": " + text_escape(s.pause->reason));
      frame += red(fit(text, static_cast<std::size_t>(cols))) + "\r\n";
      ++line;
    }
    if (queues.empty()) frame += "(no queues yet: q create QUEUE)\r\n";
    Screen::put(frame);

    wait_for_refresh_or_key(interval, keys);
  }
}

}  // namespace

void add_top(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<TopFlags>();
  if (!ctx.wants("top")) return;
  auto* cmd = app.add_subcommand(
      "top",
      "Live full-screen view of every queue: counts, in and out rates, depth sparkline, "
      "oldest message, time to empty. q or Ctrl-C quits");
  cmd->add_option("QUEUE", f->queue, "Only this queue");
  cmd->add_option("--interval", f->interval, "Refresh every DUR (default 1s)")->type_name("DUR");
  cmd->callback([f, &ctx] { run_top(*f, ctx); });
}

}  // namespace cli
