// The help formatter, `q help`, the exit codes of each command and the hidden
// `q cli-spec`. One description of the command line: --help renders it for
// people, cli-spec as JSON for completions/generate and tests/docs.
#include "cli/help.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <regex>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/context.hpp"
#include "libq/backends.hpp"

namespace cli {
namespace {

constexpr const char* kNotes = R"(Queue file: -f/--file, else $Q_FILE, else
  ${XDG_DATA_HOME:-$HOME/.local/share}/q/default.q
NATS JetStream cluster: -f nats://HOST:PORT[,HOST:PORT...]/NAMESPACE, or
  tls://... for TLS required; log in with NATS_USER and NATS_PASSWORD,
  NATS_CREDS or NATS_NKEY; TLS with NATS_CA, NATS_CERT and NATS_KEY (q(1)).
Durations: 500ms, 30s, 5m, 2h, 4d, combinations like 1h30m, or a bare number of
  seconds. Rates: 50/s, 3000/m, 10/h.
Times: RFC 3339 (2026-11-30T08:00:00Z) or @UNIX_SECONDS.
Environment: Q_FILE, Q_NO_SYNC=1, Q_LOCK_TIMEOUT, XDG_DATA_HOME, NATS_USER,
  NATS_PASSWORD, NATS_CREDS, NATS_NKEY, NATS_CA, NATS_CERT, NATS_KEY.)";

const std::vector<std::string> kEnvironment = {
    "Q_FILE",     "Q_NO_SYNC", "Q_LOCK_TIMEOUT", "XDG_DATA_HOME", "NATS_USER", "NATS_PASSWORD",
    "NATS_CREDS", "NATS_NKEY", "NATS_CA",        "NATS_CERT",     "NATS_KEY"};

const std::map<int, std::string>& general_meanings() {
  static const std::map<int, std::string> m = {
      {0, "success"},
      {1, "nothing to receive"},
      {3, "stale receipt (the message was redelivered, acked, released or dead-lettered)"},
      {4, "partly done: q work: a message failed; redrive --rate: stopped partway"},
      {64, "usage error"},
      {65, "bad input data (too large, malformed receipt or attribute)"},
      {66, "not found (no such queue file, directory, queue or message)"},
      {69,
       "busy: the writer lock was not granted within --lock-timeout (NATS: no server "
       "answered)"},
      {73, "the queue file is on a read-only file system: it can be read, not changed"},
      {74, "I/O error, disk full, corrupt or incompatible queue file"},
      {75, "queue full, try later (nothing was written)"},
      {77, "permission denied (NATS: credentials refused, TLS failed, subject not permitted)"},
  };
  return m;
}

// What every command that opens the queue file can return.
const std::vector<int> kBase = {0, 64, 66, 69, 73, 74, 77};

std::vector<int> with(std::vector<int> extra) {
  extra.insert(extra.end(), kBase.begin(), kBase.end());
  std::sort(extra.begin(), extra.end());
  return extra;
}

std::size_t help_width() {
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return std::clamp<std::size_t>(ws.ws_col, 40, 160);
  return 80;
}

bool visible(const CLI::App* a) { return !a->get_group().empty(); }
bool visible(const CLI::Option* o) { return !o->get_group().empty(); }

std::vector<const CLI::App*> children(const CLI::App* app) {
  return app->get_subcommands([](const CLI::App* a) { return visible(a); });
}

const CLI::App* root_of(const CLI::App* app) {
  while (app->get_parent()) app = app->get_parent();
  return app;
}

struct Value {
  std::string label;                 // "N", "DUR"; empty for a flag
  std::vector<std::string> choices;  // a fixed set ("on", "off")
};

// CLI11 appends validators to the type name ("UINT:INT in [1 - 10]",
// "TEXT:{on,off}"): the label is what comes before, the choices a {set}.
Value value_of(const CLI::Option* o) {
  Value v;
  if (o->get_type_size() == 0) return v;
  std::string full = o->get_type_name();
  auto colon = full.find(':');
  v.label = full.substr(0, colon);
  while (colon != std::string::npos) {
    auto next = full.find(':', colon + 1);
    std::string check = full.substr(colon + 1, next == std::string::npos ? next : next - colon - 1);
    if (check.size() > 2 && check.front() == '{' && check.back() == '}') {
      std::string list = check.substr(1, check.size() - 2);
      std::size_t at = 0;
      while (at <= list.size()) {
        auto comma = list.find(',', at);
        std::string item = list.substr(at, comma == std::string::npos ? comma : comma - at);
        item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
        if (!item.empty()) v.choices.push_back(item);
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    }
    colon = next;
  }
  if (v.label == "UINT" || v.label == "INT") v.label = "N";
  if (v.label == "FLOAT") v.label = "NUMBER";
  if (v.label == "TEXT" && !v.choices.empty()) {
    v.label.clear();
    for (const auto& c : v.choices) v.label += (v.label.empty() ? "" : "|") + c;
  }
  return v;
}

std::string value_type(const Value& v, bool positional, const std::string& name) {
  const std::string& l = positional ? name : v.label;
  if (!positional && l.empty()) return "flag";
  if (!v.choices.empty()) return "choice";
  if (l == "DUR") return "duration";
  if (l == "N" || l == "COUNT") return "count";
  if (l == "N/s" || l == "RATE") return "rate";
  if (l == "PATH" || l == "FILE" || l == "DIR") return "path";
  if (l == "TIME") return "time";
  if (l == "QUEUE") return "queue";
  if (l == "BYTES" || l == "SIZE") return "size";
  if (l == "[W,]C") return "threshold";
  if (l == "COMMAND") return "command";
  return "text";
}

std::vector<std::string> names_of(const CLI::Option* o) {
  std::vector<std::string> names;
  for (const auto& s : o->get_snames()) names.push_back("-" + s);
  for (const auto& l : o->get_lnames()) names.push_back("--" + l);
  // A negated flag (--fifo,--standard{false}) keeps its second name here.
  for (const auto& f : o->get_fnames())
    if (std::find(names.begin(), names.end(), "--" + f) == names.end()) names.push_back("--" + f);
  return names;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// "(default 1, at most 1024)", "(default: the queue's)": the default a
// description states.
std::optional<std::string> default_of(const CLI::Option* o) {
  if (!o->get_default_str().empty()) return o->get_default_str();
  static const std::regex re(R"(\(default:? ([^;,)]+))");
  std::smatch m;
  const std::string& d = o->get_description();
  if (std::regex_search(d, m, re)) return m[1].str();
  return std::nullopt;
}

bool repeatable(const CLI::Option* o) {
  return o->get_expected_max() >= CLI::detail::expected_max_vector_size ||
         o->get_expected_max() > 1;
}

std::vector<const CLI::Option*> options_of(const CLI::App* app, bool positional) {
  return app->get_options([positional](const CLI::Option* o) {
    return visible(o) && (positional ? !o->nonpositional() : o->nonpositional());
  });
}

std::string usage(const CLI::App* app) {
  std::string out = command_path(app);
  if (!options_of(app, false).empty()) out += " [OPTIONS]";
  for (const auto* p : options_of(app, true)) {
    std::string n = p->get_name();
    if (n == "COMMAND") out += " --";
    if (repeatable(p)) n += "...";
    out += " " + (p->get_required() ? n : "[" + n + "]");
  }
  if (!children(app).empty()) out += " COMMAND";
  return out;
}

struct Entry {
  std::string head, text;
};

std::string option_head(const CLI::Option* o) {
  std::string head = join(names_of(o), ", ");
  Value v = value_of(o);
  if (!v.label.empty()) head += " " + v.label;
  return head;
}

std::string section(const std::string& title, const std::vector<Entry>& entries, std::size_t col,
                    std::size_t width) {
  if (entries.empty()) return {};
  std::string out = "\n" + title + ":\n";
  for (const auto& e : entries) {
    std::string line = "  " + e.head;
    if (e.text.empty()) {
      out += line + "\n";
    } else if (line.size() + 2 <= col) {
      out += line + std::string(col - line.size(), ' ') +
             wrap(e.text, width, col, col).substr(col) + "\n";
    } else {
      out += line + "\n" + wrap(e.text, width, col, col) + "\n";
    }
  }
  return out;
}

class HelpFormatter : public CLI::FormatterBase {
 public:
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    const std::size_t width = help_width();
    const bool root = app->get_parent() == nullptr;
    const std::string path = command_path(app);
    std::vector<Entry> args, subs, opts, globals, codes;
    for (const auto* p : options_of(app, true))
      args.push_back({p->get_name(), p->get_description()});
    for (const auto* c : children(app)) subs.push_back({c->get_name(), c->get_description()});
    for (const auto* o : options_of(app, false))
      (root ? globals : opts).push_back({option_head(o), o->get_description()});
    if (!root) {
      for (const auto* o : options_of(root_of(app), false)) {
        if (o->check_lname("help") || o->check_lname("version")) continue;
        globals.push_back({option_head(o), o->get_description()});
      }
    }
    for (const auto& c : exit_codes(path))
      codes.push_back({(c.code < 10 ? " " : "") + std::to_string(c.code), c.meaning});

    std::size_t longest = 0;
    for (const auto* list : {&args, &subs, &opts, &globals})
      for (const auto& e : *list) longest = std::max(longest, e.head.size());
    const std::size_t col =
        std::min<std::size_t>(longest + 4, std::min<std::size_t>(30, width / 3));

    std::string out = "Usage: " + usage(app) + "\n";
    if (root) out += "       q help [COMMAND...]\n";
    out += "\n" + wrap(app->get_description(), width, 0, 0) + "\n";
    out += section("Arguments", args, col, width);
    out += section("Commands", subs, col, width);
    out += section("Options", opts, col, width);
    out += section(root ? "Options" : "Global options", globals, col, width);
    if (root) out += "\n" + std::string(kNotes) + "\n";
    out += section("Exit status", codes, 6, width);
    out += "\n";
    if (!subs.empty())
      out += wrap("Run 'q help " + (root ? std::string() : path.substr(2) + " ") +
                      "COMMAND' for a command's options.",
                  width, 0, 0);
    else
      out += wrap("Queue file, durations, rates and times: see 'q --help'.", width, 0, 0);
    return out + "\n";
  }
};

nlohmann::ordered_json option_json(const CLI::Option* o) {
  Value v = value_of(o);
  nlohmann::ordered_json j;
  j["names"] = names_of(o);
  j["value_name"] = v.label.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(v.label);
  j["type"] = value_type(v, false, "");
  j["required"] = o->get_required();
  j["repeatable"] = !v.label.empty() && repeatable(o);
  j["choices"] = v.choices;
  std::vector<std::string> excludes;
  for (const auto* x : o->get_excludes()) excludes.push_back(names_of(x).back());
  std::sort(excludes.begin(), excludes.end());
  j["excludes"] = excludes;
  auto d = default_of(o);
  j["default"] = d ? nlohmann::ordered_json(*d) : nlohmann::ordered_json();
  j["description"] = o->get_description();
  return j;
}

nlohmann::ordered_json command_json(const CLI::App* app) {
  nlohmann::ordered_json j;
  std::string path = command_path(app);
  j["name"] = app->get_parent() ? app->get_name() : "q";
  j["path"] = path;
  j["description"] = app->get_description();
  j["usage"] = usage(app);
  j["positionals"] = nlohmann::ordered_json::array();
  for (const auto* p : options_of(app, true)) {
    Value v = value_of(p);
    j["positionals"].push_back({{"name", p->get_name()},
                                {"type", value_type(v, true, p->get_name())},
                                {"required", p->get_required()},
                                {"repeatable", repeatable(p)},
                                {"description", p->get_description()}});
  }
  j["options"] = nlohmann::ordered_json::array();
  for (const auto* o : options_of(app, false)) j["options"].push_back(option_json(o));
  j["exit_codes"] = nlohmann::ordered_json::array();
  for (const auto& c : exit_codes(path))
    j["exit_codes"].push_back({{"code", c.code}, {"meaning", c.meaning}});
  j["commands"] = nlohmann::ordered_json::array();
  for (const auto* c : children(app)) j["commands"].push_back(command_json(c));
  return j;
}

}  // namespace

std::string wrap(const std::string& text, std::size_t width, std::size_t indent,
                 std::size_t first) {
  std::string out(first, ' ');
  std::size_t col = first;
  bool line_empty = true;
  std::size_t at = 0;
  while (at < text.size()) {
    if (text[at] == '\n') {
      out += "\n" + std::string(indent, ' ');
      col = indent;
      line_empty = true;
      ++at;
      continue;
    }
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    std::size_t end = text.find_first_of(" \n", at);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(at, end - at);
    if (!line_empty && col + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    line_empty = false;
    at = end;
  }
  return out;
}

std::shared_ptr<CLI::FormatterBase> help_formatter() { return std::make_shared<HelpFormatter>(); }

std::string command_path(const CLI::App* app) {
  std::string path;
  for (; app && app->get_parent(); app = app->get_parent()) path = " " + app->get_name() + path;
  return "q" + path;
}

std::vector<ExitCode> exit_codes(const std::string& path) {
  static const std::map<std::string, std::vector<int>> by_command = {
      {"q create", {0, 64, 69, 73, 74, 77}},
      {"q send", with({65, 75})},
      {"q receive", with({1})},
      {"q ack", with({3, 65})},
      {"q extend", with({3, 65})},
      {"q nack", with({3, 65})},
      {"q work", with({4, 75})},
      {"q redrive", with({1, 4, 65, 75})},
      {"q purge", with({1})},
      {"q delete", with({1})},
      {"q dlq", with({1, 65})},
      {"q dlq list", kBase},
      {"q dlq show", with({65})},
      {"q dlq delete", with({1, 65})},
      {"q dlq purge", with({1})},
      {"q show", with({65})},
      {"q import", with({65, 75})},
      {"q check", {0, 1, 2, 3}},
  };
  std::vector<ExitCode> out;
  if (path == "q") {
    for (const auto& [code, meaning] : general_meanings()) out.push_back({code, meaning});
    out.push_back({2, "q check: CRITICAL (q check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)"});
    std::sort(out.begin(), out.end(),
              [](const ExitCode& a, const ExitCode& b) { return a.code < b.code; });
    return out;
  }
  if (path == "q check") {
    return {{0, "OK"},
            {1, "WARNING: a warning threshold was passed"},
            {2, "CRITICAL: a critical threshold was passed"},
            {3, "UNKNOWN: the check could not run (any error, usage errors included)"}};
  }
  if (path == "q work")
    out = {{4, "at least one message failed (released for a retry or dead-lettered)"},
           {75, "--trip: too many failures; the queue was paused"}};
  if (path == "q redrive")
    out = {{1, "no dead letter matched: nothing to move"},
           {4, "--rate only: some moved, then a batch was refused"}};
  if (path == "q purge" || path == "q delete" || path == "q dlq purge" || path == "q dlq delete")
    out = {{1, "the question was not answered yes: nothing was removed"}};
  if (path == "q dlq")
    out = {{1, "delete, purge: the question was not answered yes: nothing was removed"}};
  // The command's own entry, else its top-level command's (q dlq list: q dlq).
  auto it = by_command.find(path);
  if (it == by_command.end()) it = by_command.find(path.substr(0, path.find(' ', 2)));
  for (int code : it == by_command.end() ? kBase : it->second) {
    if (std::any_of(out.begin(), out.end(), [&](const ExitCode& c) { return c.code == code; }))
      continue;
    out.push_back({code, general_meanings().at(code)});
  }
  std::sort(out.begin(), out.end(),
            [](const ExitCode& a, const ExitCode& b) { return a.code < b.code; });
  return out;
}

void add_cli_spec(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("cli-spec", "Print the command line as JSON (for tools)");
  cmd->group("");
  cmd->callback([&app, &ctx] {
    nlohmann::ordered_json j = command_json(&app);
    // Hidden commands stay out: this one too.
    j["version"] = Q_VERSION;
    j["format_version"] = q::file_format_version();
    j["environment"] = kEnvironment;
    j["notes"] = kNotes;
    ctx.out += j.dump(2) + "\n";
  });
}

bool rewrite_help_command(std::vector<std::string>& args) {
  std::size_t i = 0;
  while (i < args.size()) {
    const std::string& a = args[i];
    if (a == "-f" || a == "--file" || a == "--lock-timeout") {
      i += 2;
      continue;
    }
    if (!a.empty() && a[0] == '-') {
      ++i;
      continue;
    }
    break;
  }
  if (i >= args.size() || args[i] != "help") return false;
  args.erase(args.begin() + static_cast<long>(i));
  args.push_back("--help");
  return true;
}

}  // namespace cli
