// The CLI's text and JSON writers and flag parsers (issue 12 breaks 7, 12, 13;
// issue 17 section 7).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "broker.hpp"
#include "error.hpp"
#include "rules.hpp"
#include "input.hpp"
#include "help.hpp"
#include "output.hpp"

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
