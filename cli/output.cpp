#include "cli/output.hpp"

#include <algorithm>
#include <cctype>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

namespace cli {
using q::utf8_sequence;

namespace {

// U+0080..U+009F, encoded C2 80..C2 9F: controls that terminals obey (CSI is
// U+009B) although they are valid UTF-8.
bool is_c1_control(std::string_view s, std::size_t i, std::size_t n) {
  return n == 2 && static_cast<unsigned char>(s[i]) == 0xC2 &&
         static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

// nlohmann-json leaves DEL and C1 controls as they are (valid JSON, but a
// terminal obeys them). In its output these bytes can only be inside strings,
// so they are rewritten as \u escapes here.
std::string escape_controls_in_json(std::string json) {
  if (json.find_first_of("\x7f\xc2") == std::string::npos) return json;  // the common case
  std::string out;
  out.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    auto c = static_cast<unsigned char>(json[i]);
    if (c == 0x7F) {
      out += "\\u007f";
    } else if (c == 0xC2 && i + 1 < json.size() &&
               static_cast<unsigned char>(json[i + 1]) <= 0x9F) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(json[i + 1]));
      ++i;
    } else {
      out.push_back(json[i]);
    }
  }
  return out;
}

std::string dump(const nlohmann::ordered_json& j) {
  // Only bodies and attributes must be byte-exact, and they are base64 when
  // not UTF-8; any other text that is not (an old reason cut mid-character)
  // shows U+FFFD rather than making the line invalid JSON.
  return escape_controls_in_json(
      j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace));
}

}  // namespace

std::string json_string(std::string_view s) { return dump(nlohmann::ordered_json(std::string(s))); }

std::string text_escape(std::string_view s, std::size_t max) {
  std::string out;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (max && shown >= max) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = utf8_sequence(s, i);
    if (is_c1_control(s, i, n)) {
      out += fmt::format("\\x{:02x}\\x{:02x}", c, static_cast<unsigned char>(s[i + 1]));
    } else if (n > 1) {
      out.append(s.substr(i, n));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (n == 0 || c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
    i += n ? n : 1;
    ++shown;
  }
  return out;
}

std::string flag_name(std::string_view field) {
  std::string flag = "--" + std::string(field);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string error_text(const q::Error& e) { return error_text(e, {}); }

std::string error_text(const q::Error& e, const std::vector<std::string>& similar_queues) {
  std::string text = e.what();
  const std::string& field = e.field();
  if (!field.empty()) {
    // Each whole-word mention of the field: the field names nothing else there.
    auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    std::string flag = flag_name(field);
    for (std::size_t at = text.find(field); at != std::string::npos;
         at = text.find(field, at + 1)) {
      std::size_t end = at + field.size();
      if ((at > 0 && is_word(text[at - 1])) || (end < text.size() && is_word(text[end]))) continue;
      text.replace(at, field.size(), flag);
      at += flag.size() - 1;
    }
  }
  switch (e.remedy()) {
    case q::Remedy::None: break;
    case q::Remedy::CreateQueue:
      // Similar names first: "q receive job" is more often a typo of "jobs"
      // than a queue to create.
      if (!similar_queues.empty()) {
        std::string list;
        for (std::size_t i = 0; i < similar_queues.size(); ++i)
          list += (i == 0                           ? ""
                   : i + 1 == similar_queues.size() ? " or "
                                                    : ", ") +
                  similar_queues[i];
        text +=
            fmt::format("; did you mean {}? (else create it with 'q create {}')", list, e.queue());
      } else {
        text += fmt::format(" (create it with 'q create {}')", e.queue());
      }
      break;
    case q::Remedy::CreateFile: text += " (make one with 'q create QUEUE')"; break;
    case q::Remedy::ChangeConfig:
      text += fmt::format("; change it with 'q config {} {} {}'", e.queue(), flag_name(field),
                          e.wanted());
      break;
  }
  return text;
}

namespace {
std::string& error_prefix() {
  static std::string prefix = "q";
  return prefix;
}
}  // namespace

void set_error_prefix(std::string command_path) { error_prefix() = std::move(command_path); }
const std::string& error_prefix_text() { return error_prefix(); }

std::size_t terminal_columns(int fd) {
  winsize ws{};
  if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

std::string fit_width(std::string_view line, std::size_t width) {
  // Columns, not bytes: count UTF-8 lead bytes only.
  std::size_t cols = 0, at = 0;
  for (; at < line.size(); ++at) {
    if ((static_cast<unsigned char>(line[at]) & 0xC0) == 0x80) continue;
    if (cols == width) break;
    ++cols;
  }
  if (at >= line.size()) return std::string(line);
  // Too long: cut one column earlier and mark the cut.
  std::size_t keep = 0;
  cols = 0;
  for (; keep < line.size(); ++keep) {
    if ((static_cast<unsigned char>(line[keep]) & 0xC0) == 0x80) continue;
    if (cols + 1 == width) break;
    ++cols;
  }
  return std::string(line.substr(0, keep)) + (width > 0 ? "~" : "");
}

void print_error(std::string_view message) {
  std::string line = error_prefix() + ": " + text_escape(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

struct JsonObject::Impl {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
};

JsonObject::JsonObject() : impl_(std::make_unique<Impl>()) {}
JsonObject::~JsonObject() = default;

JsonObject& JsonObject::str(std::string_view k, std::string_view v) {
  impl_->j[std::string(k)] = std::string(v);
  return *this;
}
JsonObject& JsonObject::num(std::string_view k, long long v) {
  impl_->j[std::string(k)] = v;
  return *this;
}
JsonObject& JsonObject::real(std::string_view k, double v) {
  // Whole numbers print as such ("rate_per_second":50, not 50.0).
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    impl_->j[std::string(k)] = static_cast<long long>(v);
  else
    impl_->j[std::string(k)] = v;
  return *this;
}
JsonObject& JsonObject::boolean(std::string_view k, bool v) {
  impl_->j[std::string(k)] = v;
  return *this;
}
JsonObject& JsonObject::null(std::string_view k) {
  impl_->j[std::string(k)] = nullptr;
  return *this;
}
JsonObject& JsonObject::time(std::string_view k, q::Millis instant) {
  return str(k, q::format_time(instant));
}
JsonObject& JsonObject::body(std::string_view body) {
  if (is_utf8(body)) return str("body", body);
  return str("body_base64", base64(body));
}
JsonObject& JsonObject::attributes(const q::Attributes& attributes) {
  auto text = nlohmann::ordered_json::object();
  auto encoded = nlohmann::ordered_json::object();
  for (const auto& [key, value] : q::last_value_wins(attributes)) {
    if (is_utf8(key) && is_utf8(value))
      text[key] = value;
    else
      encoded[base64(key)] = base64(value);
  }
  impl_->j["attributes"] = std::move(text);
  if (!encoded.empty()) impl_->j["attributes_base64"] = std::move(encoded);
  return *this;
}
std::string JsonObject::done() const { return dump(impl_->j); }

q::Attributes attributes_from_json(const nlohmann::json& message) {
  q::Attributes out;
  auto object = [&](const char* name) -> const nlohmann::json* {
    auto it = message.find(name);
    if (it == message.end() || it->is_null()) return nullptr;
    if (!it->is_object()) throw std::invalid_argument(fmt::format("\"{}\" is not an object", name));
    return &*it;
  };
  if (const auto* text = object("attributes"))
    for (const auto& [key, value] : text->items()) {
      if (!value.is_string()) throw std::invalid_argument("attribute values must be strings");
      out.emplace_back(key, value.get<std::string>());
    }
  if (const auto* encoded = object("attributes_base64"))
    for (const auto& [key, value] : encoded->items()) {
      auto k = unbase64(key);
      auto v = value.is_string() ? unbase64(value.get<std::string>()) : std::nullopt;
      if (!k || !v)
        throw std::invalid_argument("\"attributes_base64\": keys and values must be base64");
      out.emplace_back(std::move(*k), std::move(*v));
    }
  return q::last_value_wins(std::move(out));
}

std::string message_json(const q::Message& m, bool with_state) {
  JsonObject o;
  o.str("id", m.id);
  if (!m.receipt.empty()) o.str("receipt", m.receipt);
  o.body(m.body);
  o.num("receive_count", m.receive_count);
  o.time("sent_at", m.sent_at);
  o.attributes(m.attributes);
  if (with_state) o.str("state", q::to_string(m.state));
  if (m.state == q::MessageState::InFlight)
    o.time("visible_until", m.visible_at);
  else if (m.state == q::MessageState::Delayed)
    o.time("visible_at", m.visible_at);
  if (m.first_received_at) o.time("first_received_at", *m.first_received_at);
  if (m.last_received_at) o.time("last_received_at", *m.last_received_at);
  if (m.dead_at) o.time("dead_at", *m.dead_at);
  if (!m.reason.empty()) o.str("reason", m.reason);
  if (!m.dedup_id.empty()) o.str("dedup_id", m.dedup_id);
  if (!m.group.empty()) o.str("group", m.group);
  return o.done() + "\n";
}

std::string Table::render() const {
  std::vector<std::size_t> width;
  auto display_width = [](const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  for (const auto& row : rows_)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], display_width(row[i]));
    }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - display_width(row[i]) + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace cli
