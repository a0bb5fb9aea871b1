// A steady rate of starts: the generic cell rate algorithm (GCRA), a token
// bucket kept as one number. Used by a queue's shared `rate` (its state lives
// in the queue record, so every consumer of the file shares it) and by
// `q work --rate` (per process).
#pragma once

#include <cstdint>

#include "libq/clock.hpp"

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

  // Gives back `starts` taken and not used (a pull that delivered fewer).
  void give_back(std::uint64_t starts) {
    if (limited()) tat_us_ -= interval_us_ * static_cast<double>(starts);
  }

 private:
  double tat_at(Millis now) const;

  double interval_us_ = 0;
  double tolerance_us_ = 0;
  double tat_us_ = 0;
};

// A queue's shared budget (QueueConfig::rate) as a backend keeps it: the
// arrival time and the rate it was earned at. Every consumer of the queue, on
// any host, takes from it.
struct SharedRate {
  double rate = 0;
  double tat_us = 0;
};

// The limiter of a queue's shared rate: one start every 1/rate seconds and a
// burst of a tenth of a second's worth, so fast queues need not take one
// message per transaction. The rules every backend gets from here: a budget
// earned at another rate counts for nothing (`q config --rate`: an hour's
// wait earned at 1/h must not hold back starts at 200/s), and one further
// ahead than a burst and an interval is pulled back (settle) by the next
// consumer that writes it.
RateLimiter shared_rate(double rate, const SharedRate& kept);

}  // namespace q
