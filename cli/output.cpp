#include "output.hpp"

#include <fmt/format.h>

#include "timefmt.hpp"
#include "utf8.hpp"

namespace cli {
using q::utf8_sequence;

std::string base64(std::string_view s) {
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((s.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[k])); };
  for (; i + 2 < s.size(); i += 3) {
    std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    for (int shift = 18; shift >= 0; shift -= 6) out.push_back(alphabet[(v >> shift) & 63]);
  }
  if (i + 1 == s.size()) {
    std::uint32_t v = at(i) << 16;
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out += "==";
  } else if (i + 2 == s.size()) {
    std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    out += "=";
  }
  return out;
}

std::string json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7F) out += fmt::format("\\u{:04x}", c);
        else out.push_back(ch);
    }
  }
  out.push_back('"');
  return out;
}

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
    if (n > 1) {
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

JsonObject& JsonObject::key(std::string_view k) {
  if (text_.size() > 1) text_.push_back(',');
  text_ += json_string(k);
  text_.push_back(':');
  return *this;
}
JsonObject& JsonObject::str(std::string_view k, std::string_view v) {
  key(k).text_ += json_string(v);
  return *this;
}
JsonObject& JsonObject::num(std::string_view k, long long v) {
  key(k).text_ += std::to_string(v);
  return *this;
}
JsonObject& JsonObject::boolean(std::string_view k, bool v) {
  key(k).text_ += v ? "true" : "false";
  return *this;
}
JsonObject& JsonObject::null(std::string_view k) {
  key(k).text_ += "null";
  return *this;
}
JsonObject& JsonObject::time(std::string_view k, q::Millis instant) {
  return str(k, q::format_time(instant));
}
JsonObject& JsonObject::raw(std::string_view k, std::string_view json) {
  key(k).text_ += json;
  return *this;
}
JsonObject& JsonObject::body(std::string_view body) {
  if (is_utf8(body)) return str("body", body);
  return str("body_base64", base64(body));
}

std::string message_json(const q::Message& m, bool with_state) {
  JsonObject o;
  o.str("id", m.id);
  if (!m.receipt.empty()) o.str("receipt", m.receipt);
  o.body(m.body);
  o.num("receive_count", m.receive_count);
  o.time("sent_at", m.sent_at);
  std::string attributes = "{";
  for (const auto& [key, value] : m.attributes) {
    if (attributes.size() > 1) attributes.push_back(',');
    attributes += json_string(key) + ":" + json_string(value);
  }
  o.raw("attributes", attributes + "}");
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
