// What `q work` shows on stderr: notes, the progress line (on a terminal,
// redrawn about every second) and the summary at the end.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "libq/broker.hpp"

namespace cli::work {

struct Counts {
  std::uint64_t done = 0, failed = 0, dead_lettered = 0, skipped = 0, released = 0;
  std::uint64_t ended() const { return done + failed + dead_lettered + skipped; }
};

class Progress {
 public:
  Progress(std::string queue, bool quiet, bool terminal);

  // One line "q work: LINE" (not with --quiet).
  void note(const std::string& line) const;
  // Clears the progress line before anything else is written to stderr.
  void clear() const;
  // Redraws the line at most once a second (or now with `force`); `backlog`
  // is asked only when it is drawn. `now` is steady.
  void draw(q::Millis now, const Counts& counts, const std::function<std::uint64_t()>& backlog,
            bool force = false);
  // The summary line, `elapsed` since the start.
  void finish(const Counts& counts, q::Millis elapsed) const;

 private:
  std::string queue_;
  bool quiet_, terminal_;
  mutable bool shown_ = false;
  q::Millis last_draw_ = 0;
  std::deque<std::pair<q::Millis, std::uint64_t>> window_;
};

std::string describe(const Counts& counts);

}  // namespace cli::work
