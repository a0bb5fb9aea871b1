#include "cli/work/worker_progress.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "cli/output.hpp"
#include "libq/timefmt.hpp"

namespace cli::work {

namespace {

void write_stderr(const std::string& text) {
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace

std::string describe(const Counts& c) {
  return fmt::format("{} done, {} failed, {} dead-lettered, {} skipped repeats", c.done, c.failed,
                     c.dead_lettered, c.skipped);
}

Progress::Progress(std::string queue, bool quiet, bool terminal)
    : queue_(std::move(queue)), quiet_(quiet), terminal_(!quiet && terminal) {}

void Progress::note(const std::string& line) const {
  if (quiet_) return;
  clear();
  write_stderr("q work: " + line + "\n");
}

void Progress::clear() const {
  if (terminal_ && shown_) {
    write_stderr("\r\033[K");
    shown_ = false;
  }
}

void Progress::draw(q::Millis now, const Counts& counts,
                    const std::function<std::uint64_t()>& backlog_of, bool force) {
  if (!terminal_ || (!force && now - last_draw_ < 1000)) return;
  last_draw_ = now;
  // Completions per second over a sliding window of about ten seconds.
  window_.emplace_back(now, counts.ended());
  while (window_.size() > 11) window_.pop_front();
  double rate = 0;
  if (window_.size() > 1 && now > window_.front().first)
    rate = static_cast<double>(window_.back().second - window_.front().second) * 1000.0 /
           static_cast<double>(now - window_.front().first);
  std::uint64_t backlog = backlog_of();
  std::string eta =
      backlog == 0 ? "empty"
      : rate > 0
          ? "empty in " +
                q::format_duration(static_cast<q::Millis>(static_cast<double>(backlog) / rate) /
                                   1000 * 1000)
          : "empty in: never at this rate";
  std::string line = fmt::format("q work {}: {} | {:.1f}/s | depth {} | {}", queue_,
                                 describe(counts), rate, backlog, eta);
  clear();
  write_stderr("\r" + fit_width(line, terminal_columns(STDERR_FILENO) - 1));
  shown_ = true;
}

void Progress::finish(const Counts& c, q::Millis elapsed) const {
  clear();
  if (quiet_) return;
  double rate =
      elapsed > 0 ? static_cast<double>(c.ended()) * 1000.0 / static_cast<double>(elapsed) : 0;
  write_stderr(fmt::format("q work {}: {}{} in {:.1f}s ({:.1f}/s)\n", queue_, describe(c),
                           c.released ? fmt::format(", {} released at stop", c.released) : "",
                           static_cast<double>(elapsed) / 1000.0, rate));
}

}  // namespace cli::work
