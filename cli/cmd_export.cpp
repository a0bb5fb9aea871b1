// q export QUEUE, q import QUEUE: messages as JSON lines, to move them between
// files or to look at a queue with jq.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "context.hpp"
#include "error.hpp"
#include "input.hpp"
#include "output.hpp"
#include "timefmt.hpp"

namespace cli {
namespace {

std::optional<std::string> unbase64(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    int v = value(c);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

q::Message parse_line(const std::string& line, std::size_t number) {
  auto bad = [&](const std::string& why) {
    return q::Error(q::ErrorKind::InvalidData,
                    fmt::format("standard input, line {}: {}; nothing was imported", number, why));
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw bad("not JSON");
  }
  if (!j.is_object()) throw bad("not a JSON object");
  auto text = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_string()) throw bad(fmt::format("\"{}\" is not a string", key));
    return j[key].get<std::string>();
  };
  auto time = [&](const char* key) -> std::optional<q::Millis> {
    auto t = text(key);
    if (!t) return std::nullopt;
    auto parsed = q::parse_time(*t);
    if (!parsed) throw bad(fmt::format("\"{}\" is not an RFC 3339 time", key));
    return parsed;
  };
  q::Message m;
  m.id = text("id").value_or("");
  if (auto body = text("body")) {
    m.body = *body;
  } else if (auto encoded = text("body_base64")) {
    auto decoded = unbase64(*encoded);
    if (!decoded) throw bad("\"body_base64\" is not base64");
    m.body = *decoded;
  } else {
    throw bad("no \"body\" or \"body_base64\"");
  }
  if (j.contains("attributes")) {
    if (!j["attributes"].is_object()) throw bad("\"attributes\" is not an object");
    for (const auto& [key, value] : j["attributes"].items()) {
      if (!value.is_string()) throw bad("attribute values must be strings");
      m.attributes.emplace_back(key, value.get<std::string>());
    }
  }
  if (j.contains("receive_count")) {
    if (!j["receive_count"].is_number_unsigned()) throw bad("\"receive_count\" is not a count");
    m.receive_count = j["receive_count"].get<std::uint32_t>();
  }
  m.sent_at = time("sent_at").value_or(q::SystemClock().now());
  auto state = text("state").value_or("visible");
  if (state == "visible") m.state = q::MessageState::Visible;
  else if (state == "in_flight") m.state = q::MessageState::InFlight;
  else if (state == "delayed") m.state = q::MessageState::Delayed;
  else if (state == "dead") m.state = q::MessageState::Dead;
  else throw bad(fmt::format("unknown state \"{}\"", state));
  m.visible_at = time("visible_at").value_or(0);
  m.first_received_at = time("first_received_at");
  m.last_received_at = time("last_received_at");
  m.dead_at = time("dead_at");
  m.reason = text("reason").value_or("");
  m.dedup_id = text("dedup_id").value_or("");
  m.group = text("group").value_or("");
  return m;
}

}  // namespace

void add_export(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  if (!ctx.wants("export")) return;
  auto* cmd = app.add_subcommand(
      "export", "Write every message of a queue, dead letters included, as JSON lines: id, "
                "body (or body_base64), attributes, times, receive count, state");
  cmd->add_option("QUEUE", *queue, "Queue to export")->required();
  cmd->callback([queue, &ctx] {
    ctx.open()->export_messages(*queue, [&](const q::Message& m) { ctx.out += message_json(m, true); });
  });
}

void add_import(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  auto create = std::make_shared<bool>(false);
  if (!ctx.wants("import")) return;
  auto* cmd = app.add_subcommand(
      "import", "Read JSON lines as written by 'q export' from standard input into QUEUE, in "
                "one transaction; ids are kept where free. Prints the ids, one a line");
  cmd->add_option("QUEUE", *queue, "Queue to import into")->required();
  cmd->add_flag("--create", *create, "Create the queue (standard, default settings) if missing");
  cmd->callback([queue, create, &ctx] {
    std::vector<q::Message> messages;
    std::size_t number = 0;
    for (const auto& line : split_records(read_stdin(), '\n')) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      messages.push_back(parse_line(line, number));
    }
    for (const auto& id : ctx.open(*create)->import_messages(*queue, std::move(messages), *create))
      ctx.out += id + "\n";
  });
}

}  // namespace cli
