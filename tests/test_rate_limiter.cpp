#include <gtest/gtest.h>

#include "libq/clock.hpp"
#include "libq/rate_limiter.hpp"

using namespace q;

TEST(RateLimiter, UnlimitedAllowsEverything) {
  FakeClock clock;
  RateLimiter rate(0);
  EXPECT_FALSE(rate.limited());
  EXPECT_EQ(rate.allows(clock.now()), UINT64_MAX);
  rate.take(clock.now(), 1000);
  EXPECT_EQ(rate.allows(clock.now()), UINT64_MAX);
  EXPECT_EQ(rate.ready_at(clock.now()), INT64_MIN);
}

TEST(RateLimiter, OneStartPerIntervalWithoutBurst) {
  FakeClock clock;
  RateLimiter rate(4);  // one start every 250 ms
  EXPECT_EQ(rate.allows(clock.now()), 1u);
  rate.take(clock.now());
  EXPECT_EQ(rate.allows(clock.now()), 0u);
  EXPECT_EQ(rate.ready_at(clock.now()), clock.now() + 250);
  clock.advance(249);
  EXPECT_EQ(rate.allows(clock.now()), 0u);
  clock.advance(1);
  EXPECT_EQ(rate.allows(clock.now()), 1u);
  // A quiet spell saves nothing up without a burst.
  clock.advance(10 * kSecond);
  EXPECT_EQ(rate.allows(clock.now()), 1u);
  rate.take(clock.now());
  EXPECT_EQ(rate.allows(clock.now()), 0u);
}

TEST(RateLimiter, BurstAllowsSeveralAtOnceThenTheRate) {
  FakeClock clock;
  RateLimiter rate(100, 10);  // every 10 ms, 10 more at once
  EXPECT_EQ(rate.allows(clock.now()), 11u);
  rate.take(clock.now(), 11);
  EXPECT_EQ(rate.allows(clock.now()), 0u);
  EXPECT_EQ(rate.ready_at(clock.now()), clock.now() + 10);
  clock.advance(10);
  EXPECT_EQ(rate.allows(clock.now()), 1u);
  clock.advance(40);
  EXPECT_EQ(rate.allows(clock.now()), 5u);
}

TEST(RateLimiter, TakingNoneChangesNothing) {
  FakeClock clock;
  RateLimiter rate(1, 0, 123.0);
  rate.take(clock.now(), 0);
  EXPECT_EQ(rate.tat_us(), 123.0);
}

TEST(RateLimiter, AFutureFromAClockAheadIsPulledBack) {
  FakeClock clock;
  // State left by a consumer whose clock was an hour ahead.
  const double ahead_us = static_cast<double>(clock.now() + kHour) * 1000;
  RateLimiter rate(1, 0, ahead_us);
  EXPECT_EQ(rate.ready_at(clock.now()), clock.now());  // ready: the next write pulls it back
  rate.settle(clock.now());
  EXPECT_EQ(rate.tat_us(), static_cast<double>(clock.now() + kSecond) * 1000);
  EXPECT_EQ(rate.allows(clock.now()), 0u);
  clock.advance(kSecond);
  EXPECT_EQ(rate.allows(clock.now()), 1u);
}

TEST(RateLimiter, ReadyAtRoundsUpToTheMillisecond) {
  FakeClock clock;
  RateLimiter rate(3);  // every 333.33 ms
  rate.take(clock.now());
  EXPECT_EQ(rate.ready_at(clock.now()), clock.now() + 334);
}

// Issue 23 item 4: the shared budget's rules live above the backends. A
// budget earned at another rate counts for nothing (1/h, then 200/s: the
// hour's wait is gone), and one stored far ahead is pulled back to at most a
// burst and an interval, so a consumer whose clock ran ahead cannot hold the
// others back.
TEST(SharedRate, ABudgetOfAnotherRateIsVoidAndAFutureIsPulledBack) {
  FakeClock clock;
  RateLimiter slow = shared_rate(1.0 / 3600, {});
  ASSERT_EQ(slow.allows(clock.now()), 1u);
  slow.take(clock.now());
  const SharedRate kept{1.0 / 3600, slow.tat_us()};
  EXPECT_EQ(shared_rate(1.0 / 3600, kept).allows(clock.now()), 0u) << "same rate: the wait stands";
  RateLimiter fast = shared_rate(200, kept);
  EXPECT_EQ(fast.allows(clock.now()), 21u) << "200/s: one and a burst of 20, not an hour's wait";

  // A budget at the same rate stored a day ahead: settled, it waits at most
  // the burst and an interval (5 ms at 200/s) after the burst is used.
  RateLimiter ahead = shared_rate(200, {200, static_cast<double>(clock.now() + kDay) * 1000});
  ahead.settle(clock.now());
  EXPECT_LE(ahead.ready_at(clock.now()), clock.now() + 5);
  clock.advance(5);
  EXPECT_GE(ahead.allows(clock.now()), 1u);
}
