// Time for the queue comes from here, so tests can move it without sleeping.
#pragma once

#include <chrono>
#include <cstdint>

namespace q {

// Milliseconds: since the Unix epoch for instants, or a length for durations.
using Millis = std::int64_t;

constexpr Millis kSecond = 1000;
constexpr Millis kMinute = 60 * kSecond;
constexpr Millis kHour = 60 * kMinute;
constexpr Millis kDay = 24 * kHour;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Millis now() const = 0;
};

class SystemClock final : public Clock {
 public:
  Millis now() const override {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(Millis start = 1'700'000'000'000) : now_(start) {}
  Millis now() const override { return now_; }
  void advance(Millis by) { now_ += by; }
  void set(Millis to) { now_ = to; }

 private:
  Millis now_;
};

}  // namespace q
