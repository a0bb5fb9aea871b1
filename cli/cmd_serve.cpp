// q serve [--listen ADDR:PORT] (--credentials FILE | --insecure-no-auth)
//         [--tls-cert FILE --tls-key FILE] [--max-connections N] [--max-request-size BYTES]
//         [--no-group-commit]
#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/input.hpp"
#include "cli/serve/server.hpp"
#include "cli/serve_handoff.hpp"

namespace cli {
namespace {

struct ServeFlags {
  std::string listen = "127.0.0.1:9324";
  std::optional<std::string> credentials, tls_cert, tls_key;
  bool insecure = false;
  std::uint32_t max_connections = 64;
  std::uint32_t max_request = 1024 * 1024;
  bool no_group_commit = false;
};

void run_serve(const ServeFlags& f, Context& ctx) {
  serve::ServeOptions o;
  auto colon = f.listen.rfind(':');
  std::string port = colon == std::string::npos ? "" : f.listen.substr(colon + 1);
  if (colon == std::string::npos || colon == 0 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("--listen {}: not ADDRESS:PORT (like 127.0.0.1:9324)", f.listen));
  o.host = f.listen.substr(0, colon);
  if (o.host.size() > 2 && o.host.front() == '[' && o.host.back() == ']')
    o.host = o.host.substr(1, o.host.size() - 2);
  o.port = std::stoi(port);
  if (f.credentials && f.insecure)
    throw q::Error(q::ErrorKind::Usage, "--credentials and --insecure-no-auth: give one");
  if (!f.credentials && !f.insecure)
    throw q::Error(q::ErrorKind::Usage,
                   "q serve needs --credentials FILE (access keys, ~/.aws/credentials format) "
                   "or, on a loopback address, --insecure-no-auth");
  if (f.insecure && !serve::is_loopback(o.host))
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("--insecure-no-auth: only on a loopback address, not {} (give "
                               "--credentials FILE)",
                               o.host));
  if (f.tls_cert.has_value() != f.tls_key.has_value())
    throw q::Error(q::ErrorKind::Usage, "--tls-cert and --tls-key go together");
  o.credentials = f.credentials;
  o.tls_cert = f.tls_cert;
  o.tls_key = f.tls_key;
  o.max_connections = f.max_connections;
  o.max_request = f.max_request;
  o.group_commit = !f.no_group_commit;
  o.location = ctx.queue_file();
  if (!serve_runner)
    throw q::Error(q::ErrorKind::Busy, "q serve: this q has no SQS endpoint (q-serve)");
  // SIGINT and SIGTERM are blocked before the broker opens, so that every
  // thread it starts (nats.c's on nats://) inherits the mask and the stop
  // signal reaches serve()'s sigwait, not a thread where it would kill the
  // process with 143 and cut the requests in flight.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ctx.exit = serve_runner(o, ctx.open(true), ctx.clock());
}

}  // namespace

void add_serve(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ServeFlags>();
  if (!ctx.wants("serve")) return;
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve the queues of the file (or cluster) over Amazon SQS's HTTP API, so AWS SDKs and "
      "the aws CLI use them unmodified; requests are checked with AWS Signature Version 4");
  cmd->add_option("--listen", f->listen,
                  "ADDRESS:PORT to listen on (default 127.0.0.1:9324; port 0: any free port)")
      ->type_name("ADDRESS");
  cmd->add_option("--credentials", f->credentials,
                  "Access keys allowed in, in ~/.aws/credentials' format (aws_access_key_id, "
                  "aws_secret_access_key under any [profile])")
      ->type_name("FILE");
  cmd->add_flag("--insecure-no-auth", f->insecure,
                "Accept unsigned requests (only on a loopback address)");
  cmd->add_option("--tls-cert", f->tls_cert, "Serve HTTPS with this certificate (PEM)")
      ->type_name("FILE");
  cmd->add_option("--tls-key", f->tls_key, "The certificate's private key (PEM)")
      ->type_name("FILE");
  cmd->add_option("--max-connections", f->max_connections,
                  "Connections served at once, a thread each (default 64); more get 503")
      ->type_name("N")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-request-size", f->max_request,
                  "Largest request body in bytes (default 1048576); larger get 413 unread")
      ->type_name("BYTES")
      ->check(CLI::Range(300000, 64 * 1024 * 1024));
  cmd->add_flag("--no-group-commit", f->no_group_commit,
                "Commit each SendMessage and DeleteMessage alone, instead of together with "
                "the requests that arrive during another's commit (for comparison)");
  cmd->callback([f, &ctx] { run_serve(*f, ctx); });
}

}  // namespace cli
