// The command tree, the global options, and the one place where errors become
// a message on stderr and an exit code.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "crash.hpp"
#include "context.hpp"
#include "error.hpp"
#include "input.hpp"
#include "lmdb_broker.hpp"
#include "output.hpp"
#include "records.hpp"

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
  }
  return kIoErr;
}

std::string Context::queue_file() const {
  if (file) {
    if (file->empty()) throw q::Error(q::ErrorKind::Usage, "-f/--file: the path is empty");
    return *file;
  }
  if (const char* env = std::getenv("Q_FILE"); env && *env) return env;
  std::string data_home;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg == '/') {
    data_home = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    data_home = std::string(home) + "/.local/share";
  } else {
    throw q::Error(q::ErrorKind::Usage,
                   "no queue file: set -f/--file or Q_FILE (HOME is not set)");
  }
  return data_home + "/q/default.q";
}

NatsOpener nats_opener = nullptr;

bool is_nats_location(const std::string& location) {
  return location.compare(0, 7, "nats://") == 0;
}

std::unique_ptr<q::Broker> Context::open(bool create) const {
  std::string location = queue_file();
  if (is_nats_location(location)) {
    if (!nats_opener)
      throw q::Error(q::ErrorKind::Busy,
                     fmt::format("{}: this q has no NATS backend (q-nats)", location));
    q::Millis timeout = 10 * q::kSecond;
    if (lock_timeout) {
      timeout = duration_flag("--lock-timeout", *lock_timeout);
    } else if (const char* env = std::getenv("Q_LOCK_TIMEOUT"); env && *env) {
      timeout = duration_flag("Q_LOCK_TIMEOUT", std::string(env));
    }
    return nats_opener(location, timeout);
  }
  q::LmdbOptions options;
  options.open.path = location;
  options.open.create = create;
  report_crashes_as_damage(options.open.path);
  const char* no_sync_env = std::getenv("Q_NO_SYNC");
  options.open.durable = !(no_sync || (no_sync_env && std::strcmp(no_sync_env, "1") == 0));
  if (lock_timeout) {
    options.open.lock_timeout = duration_flag("--lock-timeout", *lock_timeout);
  } else if (const char* env = std::getenv("Q_LOCK_TIMEOUT"); env && *env) {
    options.open.lock_timeout = duration_flag("Q_LOCK_TIMEOUT", std::string(env));
  }
  return q::open_lmdb_broker(options);
}

bool write_stdout(const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(STDOUT_FILENO, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) std::_Exit(128 + SIGPIPE);  // the reader left: end quietly
      std::cerr << "q: cannot write to standard output: " << std::strerror(errno) << "\n";
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

namespace {

constexpr const char* kFooter = R"(Queue file: -f/--file, else $Q_FILE, else
  ${XDG_DATA_HOME:-$HOME/.local/share}/q/default.q

Durations: 500ms, 30s, 5m, 2h, 4d, combinations like 1h30m, or a bare number of
  seconds. Rates: 50/s, 3000/m, 10/h.
Times: RFC 3339 (2026-11-30T08:00:00Z) or @UNIX_SECONDS.

Exit codes:
   0  success
   1  nothing to receive
   3  stale receipt (the message was redelivered, acked, released or dead-lettered)
   4  q work: at least one message failed (released for a retry or dead-lettered)
      (q check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)
  64  usage error
  65  bad input data (too large, malformed receipt or attribute)
  66  not found (no such queue file, queue or message)
  69  busy: the writer lock was not granted within --lock-timeout
  74  I/O error, disk full, corrupt or incompatible queue file
  75  queue full, try later (nothing was written)
  77  permission denied

Environment: Q_FILE, Q_NO_SYNC=1, Q_LOCK_TIMEOUT, XDG_DATA_HOME.
Run 'q COMMAND --help' for a command's options.)";

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

// CLI11 only says "A subcommand is required" for a mistyped command.
std::string parse_error_text(CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  std::string command = command_name(argc, argv);
  if (!command.empty()) {
    try {
      app.get_subcommand(command);
    } catch (const CLI::OptionNotFound&) {
      return fmt::format("unknown command '{}'", command);
    }
  }
  if (argc <= 1) return "a command is required";
  return e.what();
}

}  // namespace

int run(int argc, char** argv) {
  // A closed pipe ends the process quietly, as for any filter; nothing is
  // printed while a transaction is open, so this never interrupts one.
  signal(SIGPIPE, SIG_DFL);
  // A file size limit must show up as an error (EFBIG), not kill us mid-commit.
  signal(SIGXFSZ, SIG_IGN);

  // What libq wants a user to know, that is no error: one line on stderr.
  q::store::set_notice_handler([](const std::string& message) {
    std::cerr << "q: warning: " << message << "\n" << std::flush;
  });

  Context ctx;
  CLI::App app{"q: a durable message queue in one file, for shell scripts and cron jobs.",
               "q"};
  app.footer(kFooter);
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version",
                       fmt::format("q {} (queue file format {})", Q_VERSION,
                                   q::store::kFormatVersion));
  app.add_option("-f,--file", ctx.file, "Queue file (default: $Q_FILE, else the XDG data path)")
      ->type_name("PATH");
  app.add_flag("--no-sync", ctx.no_sync,
               "Do not sync commits to disk: faster, but an OS crash or power loss may lose "
               "the last commits (also Q_NO_SYNC=1)");
  app.add_option("--lock-timeout", ctx.lock_timeout,
                 "Longest wait for the writer lock before exit 69 (default 10s; also "
                 "Q_LOCK_TIMEOUT)")
      ->type_name("DUR");

  ctx.command = command_name(argc, argv);
  add_create(app, ctx);
  add_config(app, ctx);
  add_send(app, ctx);
  add_receive(app, ctx);
  add_ack(app, ctx);
  add_work(app, ctx);
  add_extend(app, ctx);
  add_nack(app, ctx);
  add_peek(app, ctx);
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
      print_error(parse_error_text(app, argc, argv, e) + " (see 'q --help')");
      return kUsage;
    }
  } catch (const q::Error& e) {
    print_error(e.what());
    return exit_code(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << "q: out of memory\n";
    return kIoErr;
  }
  if (!ctx.out.empty() && !write_stdout(ctx.out)) return kIoErr;
  return ctx.exit;
}

}  // namespace cli
