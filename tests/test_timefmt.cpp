#include <gtest/gtest.h>

#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

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
  for (const char* bad : {"", "s", "-5s", "5x", "5 s", "1.5.5s", "m5", "99999999999999999999d",
                          "1.s", ".5s", "1.0005s", "1.5ms", "1h30", "5secs5"})
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
}

// Issue 27: "1.5s" and "30sec" were refused.
TEST(Duration, ParsesFractionsAndLongerUnitNames) {
  EXPECT_EQ(parse_duration("1.5s"), 1500);
  EXPECT_EQ(parse_duration("0.5"), 500);
  EXPECT_EQ(parse_duration("0.25h"), 15 * kMinute);
  EXPECT_EQ(parse_duration("1.001s"), 1001);
  EXPECT_EQ(parse_duration("30sec"), 30 * kSecond);
  EXPECT_EQ(parse_duration("2hours"), 2 * kHour);
  EXPECT_EQ(parse_duration("1min30sec"), 90 * kSecond);
  EXPECT_EQ(parse_duration("3days"), 3 * kDay);
  EXPECT_EQ(parse_duration("250msec"), 250);
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

// Cutting text to a byte budget keeps it valid UTF-8 (issue 17: reasons and
// stderr tails were cut mid-character, and export then wrote what import refused).
TEST(Utf8, PrefixAndSuffixNeverSplitACharacter) {
  const std::string text =
      "a\xc3\xa9"
      "b\xe2\x82\xac"
      "c\xf0\x9f\x98\x80"
      "d";  // aébcd with é € 😀
  ASSERT_TRUE(q::is_utf8(text));
  for (std::size_t n = 0; n <= text.size(); ++n) {
    auto head = q::utf8_prefix(text, n);
    auto tail = q::utf8_suffix(text, n);
    EXPECT_TRUE(q::is_utf8(head)) << n;
    EXPECT_TRUE(q::is_utf8(tail)) << n;
    EXPECT_LE(head.size(), n);
    EXPECT_LE(tail.size(), n);
    EXPECT_GE(head.size() + 3, n) << "cut more than one character";
    EXPECT_GE(tail.size() + 3, n) << "cut more than one character";
  }
  // Bytes that are not UTF-8 are cut where the budget says.
  EXPECT_EQ(q::utf8_prefix("\xff\xff\xff\xff", 2).size(), 2u);
}

// Issue 12 break 13: a unit given twice ("1h1h") was added up; units out of
// order ("30m1h") are as suspicious and refused too.
TEST(Duration, RefusesRepeatedOrUnorderedUnits) {
  for (const char* bad : {"1h1h", "5s5s", "1m1m", "30m1h", "1s1d", "500ms1s", "1d1d"})
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
  EXPECT_EQ(parse_duration("1d2h3m4s5ms"), kDay + 2 * kHour + 3 * kMinute + 4 * kSecond + 5);
}

// Issue 12 break 13: impossible dates and offsets were rolled over by timegm.
TEST(Time, RefusesImpossibleDatesAndOffsets) {
  for (const char* bad :
       {"2026-02-30T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
        "1900-02-29T00:00:00Z", "2026-01-01T00:00:00+25:00", "2026-01-01T00:00:00-24:00",
        "2026-01-01T00:00:00+01:60", "2026-01-01T00:00:00+99:99", "2026-00-10T00:00:00Z",
        "2026-01-00T00:00:00Z"})
    EXPECT_FALSE(parse_time(bad).has_value()) << bad;
  EXPECT_TRUE(parse_time("2028-02-29T00:00:00Z").has_value());  // leap year
  EXPECT_TRUE(parse_time("2000-02-29T00:00:00Z").has_value());  // 400-year leap
  EXPECT_EQ(parse_time("2026-01-01T00:00:00+23:59"), parse_time("2025-12-31T00:01:00Z"));
  EXPECT_EQ(parse_time("2026-01-31T00:00:00Z").value() + kDay, parse_time("2026-02-01T00:00:00Z"));
}
