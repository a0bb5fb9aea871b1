#include <gtest/gtest.h>

#include "timefmt.hpp"

using namespace q;

TEST(Duration, ParsesUnitsAndBareSeconds) {
  EXPECT_EQ(parse_duration("500ms"), 500);
  EXPECT_EQ(parse_duration("30s"), 30'000);
  EXPECT_EQ(parse_duration("5m"), 300'000);
  EXPECT_EQ(parse_duration("2h"), 7'200'000);
  EXPECT_EQ(parse_duration("4d"), 345'600'000);
  EXPECT_EQ(parse_duration("1h30m"), 5'400'000);
  EXPECT_EQ(parse_duration("45"), 45'000);
  EXPECT_EQ(parse_duration("0"), 0);
}

TEST(Duration, RefusesMalformed) {
  for (const char* bad : {"", "s", "-5s", "5x", "5 s", "1.5s", "m5", "99999999999999999999d"})
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
}

TEST(Duration, FormatsShortestExact) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(1500), "1500ms");
  EXPECT_EQ(format_duration(90'000), "90s");
  EXPECT_EQ(format_duration(300'000), "5m");
  EXPECT_EQ(format_duration(4 * kDay), "4d");
}

TEST(Time, ParsesRfc3339AndUnix) {
  EXPECT_EQ(parse_time("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_time("2026-11-30T08:00:00.250Z"), 1796025600250);
  EXPECT_EQ(parse_time("2026-11-30T09:00:00+01:00"), 1796025600000);
  EXPECT_EQ(parse_time("@1796025600"), 1796025600000);
  EXPECT_FALSE(parse_time("2026-11-30").has_value());
  EXPECT_FALSE(parse_time("2026-13-01T00:00:00Z").has_value());
  EXPECT_FALSE(parse_time("@abc").has_value());
  EXPECT_FALSE(parse_time("2026-11-30T08:00:00").has_value());
}

TEST(Time, FormatsUtcWithMilliseconds) {
  EXPECT_EQ(format_time(1796025600250), "2026-11-30T08:00:00.250Z");
  EXPECT_EQ(format_time(0), "1970-01-01T00:00:00.000Z");
}
