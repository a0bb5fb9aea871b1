// The CLI's text and JSON writers and flag parsers (issue 12 breaks 7, 12, 13;
// issue 17 section 7).
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>

#include <nlohmann/json.hpp>

#include "libq/broker.hpp"
#include "libq/error.hpp"
#include "libq/rules.hpp"
#include "cli/input.hpp"
#include "cli/dead_groups.hpp"
#include "cli/suggest.hpp"
#include "cli/help.hpp"
#include "cli/output.hpp"

using namespace cli;

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes.push_back(static_cast<char>(i * 7 + 3));
  for (std::size_t n = 0; n <= bytes.size(); ++n) {
    auto encoded = base64(std::string_view(bytes).substr(0, n));
    auto decoded = unbase64(encoded);
    ASSERT_TRUE(decoded) << n;
    EXPECT_EQ(*decoded, bytes.substr(0, n)) << n;
  }
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64("fo"), "Zm8=");
}

// The old decoder stopped at the first '=' and ignored the rest.
TEST(Base64, DecoderRefusesMalformedInput) {
  for (const char* bad : {"Zm8", "Zm8=Zm8=", "Z===", "=Zm8", "Zm 8=", "Zm8=\n",
                          "Zm9=", "Zg=", "Zh==", "Zm8!", "Zm==Zm=="})
    EXPECT_FALSE(unbase64(bad).has_value()) << bad;
  EXPECT_EQ(unbase64(""), "");
  EXPECT_EQ(unbase64("Zg=="), "f");
}

// Whatever the bytes, what q writes as JSON parses as JSON.
TEST(Json, StringsAreAlwaysValidAndControlsEscaped) {
  const std::string nasty =
      std::string("a\xff\xfe b\x01\x7f c\xc2\x9b[31m d\xe2\x82 \"\\\n\0e", 22);
  auto text = json_string(nasty);
  nlohmann::json parsed;
  ASSERT_NO_THROW(parsed = nlohmann::json::parse(text)) << text;
  EXPECT_TRUE(parsed.is_string());
  EXPECT_EQ(text.find('\x7f'), std::string::npos);
  EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos) << "C1 CSI left raw";
  EXPECT_NE(text.find("\\u009b"), std::string::npos);
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"") << "text stays readable";
}

TEST(Json, AttributesAreLosslessAndLastValueWins) {
  q::Message m;
  m.id = "m1";
  m.body = "x";
  m.attributes = {{"k", "1"},
                  {"bin", std::string("\xff\x00\x01", 3)},
                  {"k", "2"},
                  {std::string("\xfe", 1), "v"}};
  auto line = message_json(m, true);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
  EXPECT_EQ(j["attributes"], nlohmann::json({{"k", "2"}}));
  EXPECT_EQ(j["attributes_base64"].size(), 2u);
  auto back = attributes_from_json(j);
  q::Attributes want = {
      {"k", "2"}, {"bin", std::string("\xff\x00\x01", 3)}, {std::string("\xfe", 1), "v"}};
  std::sort(back.begin(), back.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(back, want);
  // Only text: no attributes_base64 at all.
  m.attributes = {{"a", "b"}};
  EXPECT_EQ(nlohmann::json::parse(message_json(m, true)).count("attributes_base64"), 0u);
  EXPECT_THROW(attributes_from_json(nlohmann::json::parse(R"({"attributes_base64":{"a":"b"}})")),
               std::invalid_argument);
}

TEST(Text, EscapesC1ControlsLikeC0) {
  EXPECT_EQ(text_escape("a\xc2\x9b"
                        "31mb"),
            "a\\xc2\\x9b31mb");
  EXPECT_EQ(text_escape("a\xc2\x85z"), "a\\xc2\\x85z");
  EXPECT_EQ(text_escape("\xc2\xa0\xc3\xa9"), "\xc2\xa0\xc3\xa9") << "U+00A0 and é are text";
  EXPECT_EQ(text_escape("r\r"), "r\\r");
}

TEST(Attributes, RefusesNonUtf8AndRepeatsAtTheLibraryLevel) {
  EXPECT_NO_THROW(q::check_attributes("Q", {{"a", "1"}, {"b", "\xc3\xa9"}}));
  auto kind_of = [](const q::Attributes& a) {
    try {
      q::check_attributes("Q", a);
    } catch (const q::Error& e) {
      return e.kind();
    }
    return q::ErrorKind::Io;  // "did not throw"
  };
  EXPECT_EQ(kind_of({{"a", "\xff"}}), q::ErrorKind::InvalidData);
  EXPECT_EQ(kind_of({{"\xff", "a"}}), q::ErrorKind::InvalidData);
  EXPECT_EQ(kind_of({{"a", "1"}, {"a", "2"}}), q::ErrorKind::InvalidData);
  EXPECT_EQ(q::last_value_wins({{"a", "1"}, {"b", "x"}, {"a", "2"}}),
            (q::Attributes{{"a", "2"}, {"b", "x"}}));
}

TEST(QueueNames, NewNamesMustNotReadAsPathsOrOptions) {
  for (const char* bad : {".", "..", "-x", "--help", "-"})
    EXPECT_THROW(q::check_new_queue_name(bad), q::Error) << bad;
  for (const char* good : {"a", ".hidden", "a..b", "x-", "_y", "..."})
    EXPECT_NO_THROW(q::check_new_queue_name(good)) << good;
}

TEST(Plural, CountsWithTheirNoun) {
  EXPECT_EQ(q::plural(0, "message"), "0 messages");
  EXPECT_EQ(q::plural(1, "message"), "1 message");
  EXPECT_EQ(q::plural(2, "dead letter"), "2 dead letters");
}

// Issue 17: 1e-300/s made an interval that overflowed and was ignored.
TEST(RateFlag, RefusesRatesWhoseIntervalDoesNotFit) {
  EXPECT_DOUBLE_EQ(rate_flag("--rate", "50/s"), 50);
  EXPECT_DOUBLE_EQ(rate_flag("--rate", "3000/m"), 50);
  EXPECT_DOUBLE_EQ(rate_flag("--rate", "0"), 0);
  EXPECT_DOUBLE_EQ(rate_flag("--rate", "1/h"), 1.0 / 3600);
  EXPECT_DOUBLE_EQ(rate_flag("--rate", "1e2/s"), 100);
  for (const char* bad : {"1e-300/s", "1e-9/s", "0.00000001/h", "1e400", "2e6/s", "inf", "nan",
                          "0x10/s", "-1/s", "+1/s", "1./s", ".5/s", "5/d", ""})
    EXPECT_THROW(rate_flag("--rate", bad), q::Error) << bad;
  q::QueueConfig c;
  c.rate = 1e-300;
  EXPECT_THROW(q::validate(c), q::Error);
  c.rate = 1.0 / 3600;
  EXPECT_NO_THROW(q::validate(c));
}

namespace cli {

// q work's progress line is cut to the terminal, never inside a character.
TEST(FitWidth, CutsToColumnsNotBytes) {
  EXPECT_EQ(fit_width("short", 80), "short");
  EXPECT_EQ(fit_width("abcdef", 6), "abcdef");
  EXPECT_EQ(fit_width("abcdefg", 6), "abcde~");
  EXPECT_EQ(fit_width("ééééé", 4), "ééé~");  // two bytes each, one column each
}

// Help text wraps at word boundaries, indenting the continuation lines.
TEST(Wrap, BreaksAtWordsAndIndents) {
  EXPECT_EQ(wrap("one two three", 9, 2, 0), "one two\n  three");
  EXPECT_EQ(wrap("a b", 80, 4, 4), "    a b");
  for (const auto& line : {wrap(std::string(30, 'x') + " y z", 20, 0, 0)})
    EXPECT_EQ(line, std::string(30, 'x') + "\ny z");  // a long word stands alone
}

}  // namespace cli

// Issue 27: the mask told no causes apart ("exit status #: smtp # #.#.# ...");
// statuses stay, what differs between runs of one cause goes.
TEST(DeadGroups, MaskKeepsStatusCodesAndMasksWhatVaries) {
  EXPECT_EQ(mask_variable("smtp 451 4.2.0 mailbox busy"), "smtp 451 4.2.0 mailbox busy");
  EXPECT_EQ(mask_variable("smtp 550 5.2.0 mailbox busy"), "smtp 550 5.2.0 mailbox busy");
  EXPECT_EQ(mask_variable("550 5.1.1 <bob@example.com>: user unknown"),
            "550 5.1.1 <bob@example.com>: user unknown");
  EXPECT_EQ(mask_variable("HTTP 503 after 1503 ms (attempt 3 of 5)"),
            "HTTP 503 after # ms (attempt # of #)");
  EXPECT_EQ(mask_variable("exit status 65"), "exit status 65");
  EXPECT_EQ(mask_variable("timeout after 250 ms on 10.0.0.7:5432"),
            "timeout after # ms on #.#.#.#:#");
  EXPECT_EQ(mask_variable("at 2026-12-01T20:00:00Z request 0x7f3a deadbeef00"),
            "at #-#-#T#:#:#Z request # #");
  EXPECT_EQ(mask_variable("cannot open /var/spool/q/123.eml: No such file"),
            "cannot open #: No such file");
  EXPECT_EQ(mask_variable("bad input in message m1f"), "bad input in message #");
  EXPECT_EQ(mask_variable("worker3 v2 ./run.sh"), "worker# v# #");
}

namespace {
q::Message dead_run(int status, std::string first, std::string tail) {
  q::Message m;
  q::Attempt a;
  a.run.exit_status = status;
  a.run.first_line = std::move(first);
  a.run.stderr_tail = std::move(tail);
  m.attempts.push_back(a);
  return m;
}
}  // namespace

// Grouped by the exit status, the first stderr line and the last: a log line
// first no longer hides the error after it.
TEST(DeadGroups, GroupsByExitStatusFirstAndLastStderrLine) {
  GroupBy by;
  EXPECT_EQ(group_key(dead_run(1, "connecting to mx3.example.com",
                               "connecting to mx3.example.com\nsmtp 451 4.2.0 mailbox busy"),
                      by),
            "exit status 1: connecting to mx#.example.com ... smtp 451 4.2.0 mailbox busy");
  EXPECT_EQ(
      group_key(dead_run(65, "smtp 550 5.2.0 mailbox busy", "smtp 550 5.2.0 mailbox busy"), by),
      "exit status 65: smtp 550 5.2.0 mailbox busy");
  EXPECT_EQ(group_key(dead_run(2, "", ""), by), "exit status 2");
}

// Issue 27: "--max-size 10M" was "Could not convert". GNU's rule: K, M, G and
// KiB, MiB, GiB are binary, KB, MB, GB decimal.
TEST(SizeFlag, TakesUnitsBinaryAndDecimal) {
  EXPECT_EQ(parse_size("1048576"), 1048576u);
  EXPECT_EQ(parse_size("10M"), 10u << 20);
  EXPECT_EQ(parse_size("1MiB"), 1u << 20);
  EXPECT_EQ(parse_size("10MB"), 10'000'000u);
  EXPECT_EQ(parse_size("512k"), 512u << 10);
  EXPECT_EQ(parse_size("1.5K"), 1536u);
  EXPECT_EQ(parse_size("2G"), 2ull << 30);
  EXPECT_EQ(parse_size("100B"), 100u);
  for (const char* bad : {"", "M", "10X", "-1", "1.0001K", "1e3", "10 M", "0x10"})
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  EXPECT_THROW(size_flag("--max-size", "1G", 256u << 20), q::Error);
}

// Issue 27: --at '2026-12-01 20:00' (a space, local time) was refused.
TEST(TimeFlag, TakesLocalTimeWithoutAnOffset) {
  setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3", 1);  // Berlin, without tzdata
  tzset();
  EXPECT_EQ(time_flag("--at", "2026-12-01 20:00"), time_flag("--at", "2026-12-01T19:00:00Z"));
  EXPECT_EQ(time_flag("--at", "2026-07-01T20:00:30"), time_flag("--at", "2026-07-01T18:00:30Z"));
  EXPECT_EQ(time_flag("--at", "@1796025600"), 1796025600000);
  for (const char* bad : {"2026-02-30 20:00", "2026-12-01 24:00", "2026-12-01 20", "2026-12-01"})
    EXPECT_THROW(time_flag("--at", bad), q::Error) << bad;
  unsetenv("TZ");
  tzset();
}

// Issue 27: "did you mean", as git says it.
TEST(Suggest, NamesTheCloseOnes) {
  std::vector<std::string> commands = {"receive", "redrive", "resume", "list", "delete", "send"};
  EXPECT_EQ(similar_names("recieve", commands), std::vector<std::string>{"receive"});
  EXPECT_EQ(similar_names("ls", commands), std::vector<std::string>{"list"});
  EXPECT_EQ(similar_names("job", {"jobs", "mail"}), std::vector<std::string>{"jobs"});
  EXPECT_TRUE(similar_names("frobnicate", commands).empty());
  EXPECT_EQ(edit_distance("recieve", "receive"), 1u);
  EXPECT_EQ(did_you_mean({"a", "b"}), "; did you mean 'a' or 'b'?");
}
