// Output formats: JSON lines and text that is safe for any body.
#pragma once

#include "libq/error.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "libq/broker.hpp"
#include "libq/base64.hpp"
#include "libq/utf8.hpp"

namespace cli {

using q::is_utf8;

// Bodies and attributes that are not UTF-8 travel in JSON as base64.
using q::base64;
using q::unbase64;

// A JSON string literal, quotes included, always valid JSON: bytes that are
// not UTF-8 become U+FFFD (bodies and attributes never reach here as such:
// they use base64), and C0, DEL and C1 controls are \u escapes, so JSON read
// on a terminal cannot drive it.
std::string json_string(std::string_view s);

// One line of text for any bytes: control characters (C0, DEL, and the C1
// controls U+0080..U+009F, which terminals obey too), backslash and invalid
// UTF-8 are escaped (\n, \t, \\, \xNN); `max` > 0 cuts it with "...".
std::string text_escape(std::string_view s, std::size_t max = 0);

// The flag that sets a libq field: visibility_timeout -> --visibility-timeout.
std::string flag_name(std::string_view field);
// A libq error as the CLI says it: the field it names as the flag, and what to
// do next in q's own commands ('q create ...', 'q config ...').
std::string error_text(const q::Error& e);
// The same, naming `similar_queues` (queues whose names are close to the
// one that was not found) before suggesting q create.
std::string error_text(const q::Error& e, const std::vector<std::string>& similar_queues);

// Writes "q CMD: MESSAGE" to standard error, escaped as text_escape does:
// error messages quote what users typed (a receipt with a trailing CR must
// show it). The prefix is the command path ("q", "q send", "q dlq list"), one
// style for every error; set once the command is known.
void print_error(std::string_view message);
void set_error_prefix(std::string command_path);
const std::string& error_prefix_text();

// The width of the terminal on `fd`, 80 when it is not a terminal.
std::size_t terminal_columns(int fd);
// `line` cut to at most `width` columns (UTF-8 aware), a "~" marking a cut:
// a live line (q work's progress) must never wrap, or "\r" cannot redraw it.
std::string fit_width(std::string_view line, std::size_t width);

// Builds one JSON object a field at a time (nlohmann-json writes it).
class JsonObject {
 public:
  JsonObject();
  ~JsonObject();
  JsonObject& str(std::string_view key, std::string_view value);
  JsonObject& num(std::string_view key, long long value);
  JsonObject& real(std::string_view key, double value);
  JsonObject& boolean(std::string_view key, bool value);
  JsonObject& null(std::string_view key);
  JsonObject& time(std::string_view key, q::Millis instant);
  // "body" when valid UTF-8, else "body_base64".
  JsonObject& body(std::string_view body);
  // "attributes": {key: value} for text; "attributes_base64": {base64(key):
  // base64(value)} for pairs where either is not UTF-8 (stored before q
  // refused them). A key stored twice shows once, with its last value.
  JsonObject& attributes(const q::Attributes& attributes);
  std::string done() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads back what JsonObject::attributes wrote into `message` ("attributes"
// and "attributes_base64", each optional), a repeated key's last value
// winning. Throws std::invalid_argument with the reason when malformed.
q::Attributes attributes_from_json(const nlohmann::json& message);

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
