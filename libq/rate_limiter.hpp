// A steady rate of starts: the generic cell rate algorithm (GCRA), a token
// bucket kept as one number. Used by a queue's shared `rate` (its state lives
// in the queue record, so every consumer of the file shares it) and by
// `q work --rate` (per process).
#pragma once

#include <cstdint>

#include "clock.hpp"

namespace q {

class RateLimiter {
 public:
  // One start every 1/`rate` seconds, and up to `burst` more at once after a
  // quiet spell; `tat_us` is the state kept from before (the theoretical
  // arrival time, in microseconds). A rate of 0 or less limits nothing.
  explicit RateLimiter(double rate, double burst = 0, double tat_us = 0);

  bool limited() const { return interval_us_ > 0; }

  // How many starts are allowed at `now` (UINT64_MAX when not limited).
  std::uint64_t allows(Millis now) const;

  // Takes `starts` starts at `now`; taking none changes nothing.
  void take(Millis now, std::uint64_t starts = 1);

  // The first time a start is allowed: INT64_MIN when not limited, `now`
  // when the state lies further ahead than any consumer on this clock could
  // have put it (see settle).
  Millis ready_at(Millis now) const;

  // Pulls the state back to at most one burst and one interval ahead of
  // `now`: a consumer whose clock ran ahead (or a clock stepped back) must
  // not make every other consumer wait for its future.
  void settle(Millis now) { tat_us_ = tat_at(now); }

  double tat_us() const { return tat_us_; }

 private:
  double tat_at(Millis now) const;

  double interval_us_ = 0;
  double tolerance_us_ = 0;
  double tat_us_ = 0;
};

}  // namespace q
