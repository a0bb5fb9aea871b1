// q import QUEUE: messages as JSON lines (as q export writes them) into a queue.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/error.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

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
  try {
    m.attributes = attributes_from_json(j);
  } catch (const std::invalid_argument& e) {
    throw bad(e.what());
  }
  if (j.contains("receive_count")) {
    if (!j["receive_count"].is_number_unsigned() ||
        j["receive_count"].get<std::uint64_t>() > UINT32_MAX)
      throw bad(fmt::format("\"receive_count\" is not a count from 0 to {}", UINT32_MAX));
    m.receive_count = static_cast<std::uint32_t>(j["receive_count"].get<std::uint64_t>());
  }
  m.sent_at = time("sent_at").value_or(q::SystemClock().now());
  auto state = text("state").value_or("visible");
  if (state == "visible")
    m.state = q::MessageState::Visible;
  else if (state == "in_flight")
    m.state = q::MessageState::InFlight;
  else if (state == "delayed")
    m.state = q::MessageState::Delayed;
  else if (state == "dead")
    m.state = q::MessageState::Dead;
  else
    throw bad(fmt::format("unknown state \"{}\"", state));
  m.visible_at = time("visible_at").value_or(0);
  m.first_received_at = time("first_received_at");
  m.last_received_at = time("last_received_at");
  m.dead_at = time("dead_at");
  m.reason = text("reason").value_or("");
  // Present means given: an empty one is refused as send refuses it.
  m.dedup_id = text("dedup_id").value_or("");
  if (text("dedup_id") && m.dedup_id.empty()) throw bad("\"dedup_id\" is empty");
  m.group = text("group").value_or("");
  if (text("group") && m.group.empty()) throw bad("\"group\" is empty");
  return m;
}

// The longest line a message the queue accepts can take in JSON: a body of
// its max size written with every byte escaped (\u0000 is 6 bytes), and all
// its attributes. Longer lines are refused while being read, not parsed.
std::size_t longest_line(q::Broker& broker, const std::string& queue, bool create) {
  q::QueueConfig config;
  try {
    config = broker.configure(queue, {});
  } catch (const q::Error& e) {
    if (e.kind() != q::ErrorKind::NotFound || !create) throw;
  }
  return 6 * (std::size_t{config.max_size} + q::kMaxAttributeBytes) + 64 * 1024;
}

// Calls `each` with every line of standard input and its number; a line
// longer than max_line is refused as soon as it is.
void each_line(std::size_t max_line,
               const std::function<void(const std::string&, std::size_t)>& each) {
  std::string line;
  std::size_t number = 1;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw q::Error(q::ErrorKind::Io,
                     fmt::format("cannot read standard input: {}", std::strerror(errno)));
    if (n == 0) break;
    for (std::string_view rest(buf, static_cast<std::size_t>(n)); !rest.empty();) {
      auto end = rest.find('\n');
      line.append(rest.substr(0, end));
      if (line.size() > max_line)
        throw q::Error(q::ErrorKind::InvalidData,
                       fmt::format("standard input, line {}: over {} bytes, longer than any "
                                   "message the queue accepts; nothing was imported",
                                   number, max_line));
      if (end == std::string_view::npos) break;
      each(line, number++);
      line.clear();
      rest.remove_prefix(end + 1);
    }
  }
  if (!line.empty()) each(line, number);
}

// The progress of an import on a terminal: the messages read so far, at
// most once a second, then that they are being imported, then the count.
class Progress {
 public:
  Progress(std::string queue, bool terminal) : queue_(std::move(queue)), terminal_(terminal) {}

  void reading(std::size_t read) {
    if (!terminal_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    show(fmt::format("q import {}: read {}", queue_, q::plural(read, "message")));
  }
  void importing(std::size_t n) {
    if (!terminal_ || n == 0) return;
    show(fmt::format("q import {}: importing {}...", queue_, q::plural(n, "message")));
  }
  void done(std::size_t n) {
    if (!terminal_) return;
    show(fmt::format("q import {}: imported {}\n", queue_, q::plural(n, "message")));
  }

 private:
  void show(const std::string& line) {
    std::string text = "\r\033[K" + line;
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, text.data(), text.size());
  }
  std::string queue_;
  bool terminal_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

void add_import(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  auto create = std::make_shared<bool>(false);
  auto skip_existing = std::make_shared<bool>(false);
  auto quiet = std::make_shared<bool>(false);
  if (!ctx.wants("import")) return;
  auto* cmd = app.add_subcommand(
      "import",
      "Read JSON lines as written by 'q export' from standard input into QUEUE, in "
      "one transaction; ids are kept where free. Prints the ids, one a line");
  cmd->add_option("QUEUE", *queue, "Queue to import into")->required();
  cmd->add_flag("--create", *create, "Create the queue (standard, default settings) if missing");
  cmd->add_flag("--skip-existing", *skip_existing,
                "Leave out a message whose id is already a live or dead message of QUEUE, so a "
                "repeated import adds nothing (count on stderr)");
  cmd->add_flag("-q,--quiet", *quiet, "Print no ids");
  cmd->callback([queue, create, skip_existing, quiet, &ctx] {
    auto broker = ctx.open(*create);
    const std::size_t max_line = longest_line(*broker, *queue, *create);
    // On a terminal (never in a pipe or a log), a line that says how far it is.
    Progress progress(*queue, isatty(STDERR_FILENO) != 0);
    std::vector<q::Message> messages;
    each_line(max_line, [&](const std::string& line, std::size_t number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) return;
      messages.push_back(parse_line(line, number));
      progress.reading(messages.size());
    });
    std::set<std::string> given;
    for (const auto& m : messages) given.insert(m.id);
    progress.importing(messages.size());
    auto ids = broker->import_messages(*queue, std::move(messages), *create, *skip_existing);
    progress.done(ids.size());
    if (!*quiet)
      for (const auto& id : ids) ctx.out += id + "\n";
    if (*skip_existing) {
      std::set<std::string> stored(ids.begin(), ids.end());
      std::size_t skipped = 0;
      for (const auto& id : given) skipped += !id.empty() && !stored.count(id);
      if (skipped > 0)
        print_error(fmt::format("skipped {} already in {}", q::plural(skipped, "message"), *queue));
    }
  });
}

}  // namespace cli
