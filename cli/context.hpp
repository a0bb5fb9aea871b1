// What every command shares: the global options, the opened queue file, the
// standard output buffer (written only after the command's transaction
// committed) and the exit code.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "libq/backends.hpp"
#include "libq/broker.hpp"
#include "libq/error.hpp"

namespace cli {

// Exit codes, the same for every command (sysexits where one fits).
enum Exit : int {
  kOk = 0,
  kEmpty = 1,         // nothing to receive
  kStale = 3,         // a receipt is stale
  kPartial = 4,       // partly done: some moved or ran, then it stopped (see the command's page)
  kUsage = 64,        // EX_USAGE
  kDataErr = 65,      // EX_DATAERR: too large, malformed receipt or attribute
  kNoInput = 66,      // EX_NOINPUT: no such queue file, queue or message
  kUnavailable = 69,  // EX_UNAVAILABLE: writer lock not granted within --lock-timeout
  kReadOnly = 73,     // EX_CANTCREAT: the queue file is on a read-only file system
  kIoErr = 74,        // EX_IOERR: I/O error, disk full, corrupt or incompatible file
  kTempFail = 75,     // EX_TEMPFAIL: queue full, nothing written
  kNoPerm = 77,       // EX_NOPERM
};

int exit_code(q::ErrorKind kind);

// The options the `nats` CLI's variables give (NATS_USER, NATS_PASSWORD,
// NATS_CREDS, NATS_NKEY, NATS_CA, NATS_CERT, NATS_KEY; README, q(1) ENVIRONMENT).
q::NatsCredentials nats_credentials_from_environment();

// Locations that are not a file: nats://HOST:PORT[,...]/NAMESPACE.
bool is_nats_location(const std::string& location);

struct Context {
  // Global options.
  std::optional<std::string> file;          // -f/--file, else $Q_FILE, else the default path
  bool no_sync = false;                     // --no-sync or Q_NO_SYNC=1
  std::optional<std::string> lock_timeout;  // --lock-timeout, else $Q_LOCK_TIMEOUT, else 10s

  // The command named on the command line; empty when there is none (help).
  std::string command;
  bool wants(const char* name) const { return command.empty() || command == name; }

  // Time for the command and the queue file it opens; tests may set a FakeClock.
  const q::Clock* clock_override = nullptr;
  const q::Clock& clock() const { return clock_override ? *clock_override : system_clock_; }

  std::string out;  // standard output, written when the command is done
  int exit = kOk;

  // The queue file this invocation uses, by precedence.
  std::string queue_file() const;
  // Opens the queue file; `create` makes it (and its directories) when missing.
  std::unique_ptr<q::Broker> open(bool create = false) const;
  // For commands that only read (stats, check, peek, show, top, export, dlq
  // list/show, verify, list): a user without write permission on the queue
  // file, or a file on a read-only mount, gets it read-only (see
  // q::store::OpenOptions::read_only).
  std::unique_ptr<q::Broker> open_for_reading() const;

 private:
  // The location, clock, lock timeout and (a cluster's) credentials.
  q::BrokerRequest broker_request() const;
  // --lock-timeout, else Q_LOCK_TIMEOUT, else `fallback`.
  q::Millis file_lock_timeout(q::Millis fallback) const;
  q::SystemClock system_clock_;
};

// Writes the whole buffer to standard output; false when that failed (already
// reported). A closed pipe ends quietly.
bool write_stdout(const std::string& data);

}  // namespace cli
