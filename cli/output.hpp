// Output formats: JSON lines and text that is safe for any body.
#pragma once

#include <string>
#include <string_view>

#include "broker.hpp"
#include "utf8.hpp"

namespace cli {

using q::is_utf8;
std::string base64(std::string_view s);

// A JSON string literal, quotes included.
std::string json_string(std::string_view s);

// One line of text for any bytes: control characters, backslash and invalid
// UTF-8 are escaped (\n, \t, \\, \xNN); `max` > 0 cuts it with "...".
std::string text_escape(std::string_view s, std::size_t max = 0);

// Builds one JSON object a field at a time.
class JsonObject {
 public:
  JsonObject& str(std::string_view key, std::string_view value);
  JsonObject& num(std::string_view key, long long value);
  JsonObject& boolean(std::string_view key, bool value);
  JsonObject& null(std::string_view key);
  JsonObject& time(std::string_view key, q::Millis instant);
  JsonObject& raw(std::string_view key, std::string_view json);
  // "body" when valid UTF-8, else "body_base64".
  JsonObject& body(std::string_view body);
  std::string done() { return text_ + "}"; }

 private:
  JsonObject& key(std::string_view key);
  std::string text_ = "{";
};

// A message as one JSON line (newline included).
std::string message_json(const q::Message& m, bool with_state);

// Left-aligned columns separated by two spaces; the last column is not padded.
class Table {
 public:
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace cli
