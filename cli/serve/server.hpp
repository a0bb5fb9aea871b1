// q serve's HTTP side: cpp-httplib's server (keep-alive, a bounded pool of
// connection threads), SigV4 checked before any action runs, both SQS wire
// protocols, long polls woken by the queue file's doorbell.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "libq/broker.hpp"

namespace serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 9324;
  std::optional<std::string> credentials;  // none: --insecure-no-auth
  std::optional<std::string> tls_cert, tls_key;
  std::size_t max_connections = 64;       // connection threads; beyond, 503
  std::size_t max_request = 1024 * 1024;  // bytes of body, refused (413) before it is read
  int read_timeout = 10;                  // seconds a client may take to send a request
  int idle_timeout = 30;                  // seconds a keep-alive connection may idle
  std::string location;                   // for the start-up line
  bool group_commit = true;               // --no-group-commit: one commit per request
};

// True for 127.0.0.0/8, ::1 and localhost (inline: cmd_serve checks it in
// the static q's objects too, which do not link the server).
inline bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.compare(0, 4, "127.") == 0;
}

// Serves until SIGINT or SIGTERM; returns the exit code. Throws q::Error
// (Usage, NotFound, ...) for a bad flag or credentials file before it listens.
int serve(const ServeOptions& options, std::unique_ptr<q::Broker> broker, const q::Clock& clock);

}  // namespace serve
