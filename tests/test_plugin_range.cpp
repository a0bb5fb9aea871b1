// q check -w/-c: the monitoring-plugins range syntax (issue 27 item 6).
#include <gtest/gtest.h>

#include "libq/error.hpp"
#include "cli/plugin_range.hpp"

using cli::parse_plugin_range;

namespace {
bool alerts(const std::string& range, double value) {
  return parse_plugin_range("-w", range).alerts(value);
}
}  // namespace

// The table of the Monitoring Plugins Development Guidelines.
TEST(PluginRange, PlainNumberIsZeroToN) {
  EXPECT_FALSE(alerts("10", 0));
  EXPECT_FALSE(alerts("10", 10));
  EXPECT_TRUE(alerts("10", 10.5));
  EXPECT_TRUE(alerts("10", -1));
}

TEST(PluginRange, OpenEnds) {
  EXPECT_TRUE(alerts("10:", 9.9));
  EXPECT_FALSE(alerts("10:", 10));
  EXPECT_FALSE(alerts("10:", 1e12));
  EXPECT_FALSE(alerts("~:10", -1e12));
  EXPECT_FALSE(alerts("~:10", 10));
  EXPECT_TRUE(alerts("~:10", 11));
  EXPECT_FALSE(alerts(":10", 5));  // an empty start is 0
  EXPECT_TRUE(alerts(":10", -1));
}

TEST(PluginRange, BetweenAndInside) {
  EXPECT_TRUE(alerts("10:20", 9));
  EXPECT_FALSE(alerts("10:20", 10));
  EXPECT_FALSE(alerts("10:20", 20));
  EXPECT_TRUE(alerts("10:20", 21));
  EXPECT_FALSE(alerts("@10:20", 9));
  EXPECT_TRUE(alerts("@10:20", 10));
  EXPECT_TRUE(alerts("@10:20", 20));
  EXPECT_FALSE(alerts("@10:20", 21));
  EXPECT_TRUE(alerts("@~:0", -3));
  EXPECT_TRUE(alerts("@10", 5));
  EXPECT_FALSE(alerts("0.5:1.5", 1));
}

TEST(PluginRange, RefusesWhatIsNotARange) {
  for (const char* bad : {"", "@", "x", "10:x", "~", "20:10", "1e999", " 5", "5 ", "~:", "10::"}) {
    try {
      parse_plugin_range("-c", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const q::Error& e) {
      EXPECT_EQ(e.kind(), q::ErrorKind::Usage) << bad;
      EXPECT_NE(std::string(e.what()).find("-c '"), std::string::npos) << e.what();
    }
  }
}
