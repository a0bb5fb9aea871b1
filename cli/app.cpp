// The command tree, the global options, and the one place where errors become
// a message on stderr and an exit code.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <regex>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/crash.hpp"
#include "cli/context.hpp"
#include "libq/files.hpp"
#include "libq/error.hpp"
#include "cli/help.hpp"
#include "cli/input.hpp"
#include "libq/location.hpp"
#include "cli/nats_handoff.hpp"
#include "cli/output.hpp"
#include "cli/suggest.hpp"

namespace cli {

int exit_code(q::ErrorKind kind) {
  switch (kind) {
    case q::ErrorKind::Usage: return kUsage;
    case q::ErrorKind::InvalidData: return kDataErr;
    case q::ErrorKind::NotFound: return kNoInput;
    case q::ErrorKind::Stale: return kStale;
    case q::ErrorKind::Full: return kTempFail;
    case q::ErrorKind::Busy: return kUnavailable;
    case q::ErrorKind::Io: return kIoErr;
    case q::ErrorKind::Permission: return kNoPerm;
    case q::ErrorKind::ReadOnly: return kReadOnly;
  }
  return kIoErr;
}

std::string Context::queue_file() const {
  if (file) {
    if (file->empty()) throw q::Error(q::ErrorKind::Usage, "-f/--file: the path is empty");
    q::check_location_scheme(*file);
    return *file;
  }
  if (const char* env = std::getenv("Q_FILE"); env && *env) {
    q::check_location_scheme(env);
    return env;
  }
  std::string data_home;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg == '/') {
    data_home = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    data_home = std::string(home) + "/.local/share";
  } else {
    throw q::Error(q::ErrorKind::Usage, "no queue file: set -f/--file or Q_FILE (HOME is not set)");
  }
  return data_home + "/q/default.q";
}

// q --version: the version and file format (the first line, as before), the
// backends this q has, and the libraries it runs with.
std::string version_text() {
  std::string nats;
  if (q::has_nats_backend()) {
    nats = "nats (built in)";
  } else if (auto q_nats = find_q_nats()) {
    nats = "nats (q-nats: " + *q_nats + ")";
  } else {
    nats = "no nats (q-nats is not beside q nor on PATH)";
  }
  std::string libraries =
      fmt::format("{}, fmt {}.{}.{}, CLI11 {}", q::backend_library_versions(), FMT_VERSION / 10000,
                  FMT_VERSION / 100 % 100, FMT_VERSION % 100, CLI11_VERSION);
  return fmt::format("q {} (queue file format {})\nbackends: file, {}\nlibraries: {}", Q_VERSION,
                     q::file_format_version(), nats, libraries);
}

bool is_nats_location(const std::string& location) { return q::is_nats_location(location); }

q::NatsCredentials nats_credentials_from_environment() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value ? value : "";
  };
  q::NatsCredentials c;
  c.user = env("NATS_USER");
  c.password = env("NATS_PASSWORD");
  c.creds = env("NATS_CREDS");
  c.nkey = env("NATS_NKEY");
  c.ca = env("NATS_CA");
  c.cert = env("NATS_CERT");
  c.key = env("NATS_KEY");
  return c;
}

std::unique_ptr<q::Broker> Context::open(bool create) const {
  q::BrokerRequest request = broker_request();
  request.create = create;
  const char* no_sync_env = std::getenv("Q_NO_SYNC");
  request.durable = !(no_sync || (no_sync_env && std::strcmp(no_sync_env, "1") == 0));
  return q::open_broker(request);
}

q::BrokerRequest Context::broker_request() const {
  q::BrokerRequest request;
  request.location = queue_file();
  request.clock = &clock();
  request.timeout = file_lock_timeout(request.timeout);
  if (is_nats_location(request.location)) {
    request.credentials = nats_credentials_from_environment();
  } else {
    report_crashes_as_damage(request.location);
  }
  return request;
}

q::Millis Context::file_lock_timeout(q::Millis fallback) const {
  if (lock_timeout) return duration_flag("--lock-timeout", *lock_timeout);
  if (const char* env = std::getenv("Q_LOCK_TIMEOUT"); env && *env)
    return duration_flag("Q_LOCK_TIMEOUT", std::string(env));
  return fallback;
}

std::unique_ptr<q::Broker> Context::open_for_reading() const {
  try {
    return open();
  } catch (const q::Error& e) {
    // A cluster's refusal (credentials, TLS) is no file to read instead.
    const bool readable_anyway =
        e.kind() == q::ErrorKind::Permission || e.kind() == q::ErrorKind::ReadOnly;
    if (!readable_anyway || is_nats_location(queue_file())) throw;
  }
  q::BrokerRequest request = broker_request();
  // On a read-only mount, reads wait for q's writers (the lock timeout).
  request.read_only = true;
  return q::open_broker(request);
}

bool write_stdout(const std::string& data) {
  if (q::files::write_all(STDOUT_FILENO, data)) return true;
  if (errno == EPIPE) std::_Exit(128 + SIGPIPE);  // the reader left: end quietly
  std::cerr << error_prefix_text() << ": cannot write to standard output: " << std::strerror(errno)
            << "\n";
  return false;
}

namespace {

// The first argument that is neither an option nor a global option's value.
std::string command_name(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-f" || arg == "--file" || arg == "--lock-timeout") {
      ++i;
      continue;
    }
    if (arg == "--") return {};
    if (!arg.empty() && arg[0] != '-') return arg;
  }
  return {};
}

// The deepest command named on the command line: "q dlq list". `unknown`:
// the word after it, when that names no subcommand of one that needs one.
CLI::App* named_command(CLI::App& app, int argc, char** argv, std::string* unknown = nullptr) {
  CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (at == &app && (arg == "-f" || arg == "--file" || arg == "--lock-timeout")) {
      ++i;
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    CLI::App* sub = nullptr;
    try {
      sub = at->get_subcommand(arg);
    } catch (const CLI::OptionNotFound&) {
    }
    if (!sub || sub->get_group().empty()) {
      if (at != &app) {
        if (unknown && at->get_require_subcommand_min() > 0) *unknown = arg;
        break;
      }
      return nullptr;  // an unknown command
    }
    at = sub;
  }
  return at;
}

// The commands run() adds (only the one named is declared, so an unknown
// one finds none declared to compare with).
const std::vector<std::string> kCommands = {
    "create", "config", "send",  "receive", "ack",    "work",   "extend", "nack",
    "peek",   "show",   "pause", "resume",  "stats",  "list",   "dlq",    "redrive",
    "top",    "check",  "purge", "delete",  "export", "import", "backup", "verify"};

std::vector<std::string> subcommand_names(CLI::App* at) {
  std::vector<std::string> names;
  for (auto* sub : at->get_subcommands([](CLI::App* a) { return !a->get_group().empty(); }))
    names.push_back(sub->get_name());
  return names;
}

// The options a command takes, with those of the commands above it (q's
// global options).
std::vector<std::string> option_names(CLI::App* at) {
  std::vector<std::string> names;
  for (CLI::App* app = at; app; app = app->get_parent())
    for (const auto* opt : app->get_options()) {
      for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
      for (const auto& s : opt->get_snames()) names.push_back("-" + s);
    }
  return names;
}

// CLI11's words, in q's: naming the flag, what was typed and what it takes.
std::string parse_message(CLI::App* at, const CLI::ParseError& e) {
  const std::string what = e.what(), kind = e.get_name();
  std::smatch m;
  // (Raised by a subcommand, CLI11 names the error after the subcommand.)
  if (kind == "ExtrasError" || what.rfind("The following argument", 0) == 0) {
    // "The following argument(s) was/were not expected: A B" (last first).
    auto colon = what.find(": ");
    std::vector<std::string> args;
    std::string rest = colon == std::string::npos ? "" : what.substr(colon + 2);
    for (std::size_t at_ = 0; at_ < rest.size();) {
      auto space = rest.find(' ', at_);
      if (space == std::string::npos) space = rest.size();
      args.insert(args.begin(), rest.substr(at_, space - at_));
      at_ = space + 1;
    }
    if (args.empty()) return what;
    const std::string& arg = args.front();
    if (arg.size() > 1 && arg[0] == '-') {
      std::string name = arg.substr(0, arg.find('='));
      return fmt::format("unknown option '{}'{}", name,
                         did_you_mean(similar_names(name, option_names(at))));
    }
    return fmt::format("unexpected argument '{}'{}", arg,
                       args.size() > 1 ? fmt::format(" (and {} more)", args.size() - 1) : "");
  }
  if (kind == "ConversionError") {
    static const std::regex convert("^Could not convert: (\\S+) = (.*)$");
    static const std::regex allowed("^The value (.*) is not an allowed value for (\\S+)$");
    if (std::regex_match(what, m, convert)) {
      std::string name = m[1], type = "a value";
      if (const CLI::Option* opt = at->get_option_no_throw(name)) {
        std::string t = opt->get_type_name();
        type = t == "N" ? "a whole number (N)" : "a valid " + t;
      }
      return fmt::format("{} '{}': not {}", name, m[2].str(), type);
    }
    if (std::regex_match(what, m, allowed))
      return fmt::format("{} '{}': not one of the values it takes", m[2].str(), m[1].str());
    if (what.find(": Should be true/false") != std::string::npos)
      return fmt::format("{}: takes true or false, or no value", what.substr(0, what.find(':')));
    return what;
  }
  if (kind == "RequiredError") {
    if (what == "A subcommand is required") {
      std::string list;
      for (const auto& n : subcommand_names(at)) list += (list.empty() ? "" : ", ") + n;
      return fmt::format("a command is required after '{}': {}", command_path(at), list);
    }
    static const std::regex required("^(\\S+) is required$");
    if (std::regex_match(what, m, required)) return fmt::format("missing {}", m[1].str());
    return what;
  }
  if (kind == "ArgumentMismatch") {
    static const std::regex missing("^(\\S+): \\d+ required (\\S+) missing$");
    if (std::regex_match(what, m, missing))
      return fmt::format("{} needs a value ({})", m[1].str(), m[2].str());
    return what;
  }
  if (kind == "ValidationError") {
    static const std::regex range("^(\\S+): Value (\\S+) not in range (\\S+) to (\\S+)$");
    if (std::regex_match(what, m, range))
      return fmt::format("{} '{}': must be from {} to {}", m[1].str(), m[2].str(), m[3].str(),
                         m[4].str());
    return what;
  }
  if (kind == "ExcludesError") {
    static const std::regex excludes("^(\\S+) excludes (\\S+)$");
    if (std::regex_match(what, m, excludes))
      return fmt::format("{} and {} cannot be used together", m[1].str(), m[2].str());
  }
  if (kind == "RequiresError") {
    static const std::regex requires_("^(\\S+) requires (\\S+)$");
    if (std::regex_match(what, m, requires_))
      return fmt::format("{} needs {}", m[1].str(), m[2].str());
  }
  return what;
}

// "q CMD: what is wrong (see 'q CMD --help')". CLI11 only says "A subcommand
// is required" for a mistyped command.
std::string parse_error_text(CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  std::string command = command_name(argc, argv);
  std::string unknown;
  CLI::App* at = named_command(app, argc, argv, &unknown);
  if (!command.empty() && !at)
    return fmt::format("unknown command '{}'{} (see 'q --help')", command,
                       did_you_mean(similar_names(command, kCommands)));
  if (argc <= 1) return "a command is required (see 'q --help')";
  std::string path = command_path(at);
  if (!unknown.empty()) {
    std::string sub = path.substr(path.find(' ') + 1);
    std::vector<std::string> close;
    for (auto& n : similar_names(unknown, subcommand_names(at))) close.push_back(sub + " " + n);
    return fmt::format("unknown command '{} {}'{} (see '{} --help')", sub, unknown,
                       did_you_mean(close), path);
  }
  return fmt::format("{} (see '{} --help')", parse_message(at, e), path);
}

// For "no such queue": the queues of the file whose names are close.
std::vector<std::string> similar_queues(const Context& ctx, const q::Error& e) {
  if (e.remedy() != q::Remedy::CreateQueue || e.queue().empty()) return {};
  try {
    return similar_names(e.queue(), ctx.open_for_reading()->list_queues());
  } catch (const q::Error&) {
    return {};  // the hint is a courtesy: the error itself is what matters
  }
}

}  // namespace

int run(int argc, char** argv) {
  // A closed pipe ends the process quietly, as for any filter; nothing is
  // printed while a transaction is open, so this never interrupts one.
  signal(SIGPIPE, SIG_DFL);
  // A file size limit must show up as an error (EFBIG), not kill us mid-commit.
  signal(SIGXFSZ, SIG_IGN);

  // What libq wants a user to know, that is no error: one line on stderr.
  q::set_notice_handler([](const std::string& message) {
    std::cerr << error_prefix_text() << ": warning: " << message << "\n" << std::flush;
  });

  Context ctx;
  CLI::App app{"q: a durable message queue in one file, for shell scripts and cron jobs.", "q"};
  app.formatter(help_formatter());
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", version_text,
                       "Print the version, the backends (file; nats with q-nats) and the "
                       "libraries, and exit");
  app.add_option("-f,--file", ctx.file, "Queue file (default: $Q_FILE, else the XDG data path)")
      ->type_name("PATH");
  app.add_flag("--no-sync", ctx.no_sync,
               "Do not sync commits to disk: faster, but an OS crash or power loss may lose "
               "the last commits (also Q_NO_SYNC=1)");
  app.add_option("--lock-timeout", ctx.lock_timeout,
                 "Longest wait for the writer lock before exit 69 (default 10s; also "
                 "Q_LOCK_TIMEOUT)")
      ->type_name("DUR");

  // `q help CMD` is `q CMD --help`.
  std::vector<std::string> words(argv + 1, argv + argc);
  std::vector<char*> help_argv;
  if (rewrite_help_command(words)) {
    help_argv.push_back(argv[0]);
    for (auto& w : words) help_argv.push_back(w.data());
    argc = static_cast<int>(help_argv.size());
    argv = help_argv.data();
  }
  ctx.command = command_name(argc, argv);
  // The spec describes every command: declare them all.
  if (ctx.command == "cli-spec") ctx.command.clear();
  add_create(app, ctx);
  add_config(app, ctx);
  add_send(app, ctx);
  add_receive(app, ctx);
  add_ack(app, ctx);
  add_work(app, ctx);
  add_extend(app, ctx);
  add_nack(app, ctx);
  add_peek(app, ctx);
  add_show(app, ctx);
  add_pause(app, ctx);
  add_resume(app, ctx);
  add_stats(app, ctx);
  add_list(app, ctx);
  add_dlq(app, ctx);
  add_redrive(app, ctx);
  add_top(app, ctx);
  add_check(app, ctx);
  add_purge(app, ctx);
  add_delete(app, ctx);
  add_export(app, ctx);
  add_import(app, ctx);
  add_backup(app, ctx);
  add_verify(app, ctx);
  add_serve(app, ctx);
  add_cli_spec(app, ctx);
  if (CLI::App* named = named_command(app, argc, argv); named && named != &app)
    set_error_prefix(command_path(named));

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      // A monitoring plugin answers UNKNOWN (3) on stdout for any failure.
      if (CLI::App* named = named_command(app, argc, argv);
          named && command_path(named) == "q check") {
        std::string line = "Q UNKNOWN - " + parse_error_text(app, argc, argv, e) + "\n";
        return write_stdout(line) ? 3 : kIoErr;
      }
      print_error(parse_error_text(app, argc, argv, e));
      return kUsage;
    }
  } catch (const q::Error& e) {
    print_error(error_text(e, similar_queues(ctx, e)));
    return exit_code(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << error_prefix_text() << ": out of memory\n";
    return kIoErr;
  }
  if (!ctx.out.empty() && !write_stdout(ctx.out)) return kIoErr;
  return ctx.exit;
}

}  // namespace cli
