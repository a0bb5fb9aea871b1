// q show QUEUE ID [--json]: one message, live or dead, with its attempt history.
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <algorithm>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/output.hpp"
#include "cli/work/rates.hpp"
#include "libq/timefmt.hpp"

namespace cli {
namespace {

struct ShowFlags {
  std::string queue, id;
  bool json = false;
};

std::string attempt_json(const q::Attempt& a) {
  JsonObject o;
  o.num("receive", a.receive);
  o.time("received_at", a.received_at);
  o.num("pid", a.pid);
  if (!a.command.empty()) o.str("command", a.command);
  o.str("end", q::to_string(a.end));
  if (a.end != q::AttemptEnd::Open) o.time("ended_at", a.ended_at);
  if (!a.reason.empty()) o.str("reason", a.reason);
  if (a.run.exit_status) o.num("exit_status", *a.run.exit_status);
  if (!a.run.first_line.empty()) o.str("stderr_first_line", a.run.first_line);
  if (!a.run.stderr_tail.empty()) o.str("stderr_tail", a.run.stderr_tail);
  return o.done();
}

std::string how_it_ended(const q::Attempt& a) {
  switch (a.end) {
    case q::AttemptEnd::Open: return "in flight";
    case q::AttemptEnd::Released:
      return a.reason == q::kHolderDied ? "released (its holder died)" : "released (nack)";
    case q::AttemptEnd::TimedOut: return "timed out (lease ran out)";
    case q::AttemptEnd::HeartbeatLost: return "heartbeat lost (q work's lease ran out)";
    case q::AttemptEnd::DeadLettered: return "dead-lettered";
  }
  return "?";
}

std::string show_text(const std::string& queue, const q::Message& m, q::Millis now) {
  std::string out;
  auto line = [&](const char* name, const std::string& value) {
    out += fmt::format("{:<16}{}\n", name, value);
  };
  auto when = [&](q::Millis t) {
    return fmt::format("{} ({} {})", q::format_time(t), short_duration(std::abs(now - t)),
                       t <= now ? "ago" : "from now");
  };
  line("id", m.id);
  line("queue", queue);
  std::string state = q::to_string(m.state);
  if (m.state == q::MessageState::InFlight) state += ", visible again at " + when(m.visible_at);
  if (m.state == q::MessageState::Delayed) state += ", visible at " + when(m.visible_at);
  line("state", state);
  line("sent", when(m.sent_at));
  line("receives", std::to_string(m.receive_count));
  if (m.first_received_at) line("first received", when(*m.first_received_at));
  if (m.last_received_at) line("last received", when(*m.last_received_at));
  if (m.dead_at) line("dead since", when(*m.dead_at));
  if (!m.reason.empty()) line("reason", text_escape(m.reason));
  if (!m.group.empty()) line("group", m.group);
  if (!m.dedup_id.empty()) line("dedup id", text_escape(m.dedup_id));
  for (const auto& [key, value] : m.attributes)
    line("attribute", text_escape(key) + "=" + text_escape(value));
  line("body", fmt::format("{} bytes: {}", m.body.size(), text_escape(m.body, 200)));
  if (m.attempts.empty()) {
    out += "attempts        none recorded\n";
    return out;
  }
  // Only the last kMaxAttempts ended attempts are kept, and the one in flight
  // besides (issue 25 item 15: "9 (the last 8 are kept)" read as a lie).
  std::size_t ended = std::count_if(m.attempts.begin(), m.attempts.end(), [](const q::Attempt& a) {
    return a.end != q::AttemptEnd::Open;
  });
  std::string kept;
  if (ended >= q::kMaxAttempts)
    kept = fmt::format(" (only the last {} ended ones are kept{})", q::kMaxAttempts,
                       ended < m.attempts.size() ? ", and the one in flight" : "");
  out += fmt::format("attempts        {}{}\n", m.attempts.size(), kept);
  std::uint32_t previous = 0;
  for (const auto& a : m.attempts) {
    // #N is the receive count the delivery had; a redrive or an import
    // starts it again, which is said rather than numbering #1, #2, #1.
    std::string restarted =
        a.receive <= previous ? " (its receive count started again: redriven or imported)" : "";
    previous = a.receive;
    out +=
        fmt::format("  #{}  received {}  by pid {}{}{}\n", a.receive, q::format_time(a.received_at),
                    a.pid, a.worker_since != 0 ? " (q work)" : "", restarted);
    if (!a.command.empty()) out += "      command: " + text_escape(a.command) + "\n";
    std::string end = how_it_ended(a);
    if (a.end != q::AttemptEnd::Open)
      end += fmt::format(" at {}, after {}", q::format_time(a.ended_at),
                         short_duration(a.ended_at - a.received_at));
    out += "      ended: " + end + "\n";
    if (a.run.exit_status) out += fmt::format("      exit status: {}\n", *a.run.exit_status);
    if (!a.reason.empty()) out += "      reason: " + text_escape(a.reason) + "\n";
    if (!a.run.stderr_tail.empty()) {
      std::string_view rest(a.run.stderr_tail);
      while (!rest.empty()) {
        auto nl = rest.find('\n');
        out += "      stderr| " + text_escape(rest.substr(0, nl)) + "\n";
        if (nl == std::string_view::npos) break;
        rest.remove_prefix(nl + 1);
      }
    }
  }
  return out;
}

void run_show(const ShowFlags& f, Context& ctx) {
  auto m = ctx.open_for_reading()->show(f.queue, f.id);
  if (!m)
    throw q::Error(q::ErrorKind::NotFound, fmt::format("queue {}: no message {}", f.queue, f.id));
  if (!f.json) {
    ctx.out += show_text(f.queue, *m, q::SystemClock().now());
    return;
  }
  std::string line = message_json(*m, true);
  line.pop_back();  // the newline
  line.pop_back();  // the closing brace
  line += ",\"attempts\":[";
  for (std::size_t i = 0; i < m->attempts.size(); ++i)
    line += (i ? "," : "") + attempt_json(m->attempts[i]);
  line += "]}\n";
  ctx.out += line;
}

}  // namespace

void add_show(CLI::App& app, Context& ctx) {
  if (!ctx.wants("show")) return;
  auto f = std::make_shared<ShowFlags>();
  auto* cmd = app.add_subcommand(
      "show",
      "Show one message, live or dead: body, attributes, state, times and its attempt "
      "history (the last 8 deliveries: who received it, how each ended). Exit 66 when "
      "there is no such message");
  cmd->add_option("QUEUE", f->queue, "Queue of the message")->required();
  cmd->add_option("ID", f->id, "Message id (like m1f)")->required();
  cmd->add_flag("--json", f->json, "One JSON object with the message and an \"attempts\" array");
  cmd->callback([f, &ctx] { run_show(*f, ctx); });
}

}  // namespace cli
