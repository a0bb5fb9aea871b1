#include "libq/rate_limiter.hpp"

#include <algorithm>
#include <cmath>

namespace q {
namespace {

double micros(Millis t) { return static_cast<double>(t) * 1000; }

}  // namespace

RateLimiter::RateLimiter(double rate, double burst, double tat_us) : tat_us_(tat_us) {
  if (rate <= 0) return;
  interval_us_ = 1e6 / rate;
  tolerance_us_ = interval_us_ * burst;
}

// The state seen from `now`: never in the past (starts not taken are not
// saved up beyond the burst), never further ahead than the burst and one
// interval.
double RateLimiter::tat_at(Millis now) const {
  const double now_us = micros(now);
  return std::min(std::max(tat_us_, now_us), now_us + tolerance_us_ + interval_us_);
}

std::uint64_t RateLimiter::allows(Millis now) const {
  if (!limited()) return UINT64_MAX;
  const double now_us = micros(now);
  const double tat = tat_at(now);
  if (tat > now_us + tolerance_us_) return 0;
  return static_cast<std::uint64_t>((now_us + tolerance_us_ - tat) / interval_us_) + 1;
}

void RateLimiter::take(Millis now, std::uint64_t starts) {
  if (!limited() || starts == 0) return;
  tat_us_ = tat_at(now) + interval_us_ * static_cast<double>(starts);
}

Millis RateLimiter::ready_at(Millis now) const {
  if (!limited()) return INT64_MIN;
  if (tat_us_ > micros(now) + tolerance_us_ + interval_us_) return now;
  return static_cast<Millis>(std::ceil((tat_at(now) - tolerance_us_) / 1000));
}

RateLimiter shared_rate(double rate, const SharedRate& kept) {
  return RateLimiter(rate, std::floor(rate / 10), kept.rate == rate ? kept.tat_us : 0);
}

}  // namespace q
