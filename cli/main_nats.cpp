// q-nats: the q command line with the NATS JetStream backend; `q` hands it
// nats:// and tls:// locations (cli/nats_handoff.hpp). File locations work here too.
#include <cstdlib>

#include <nats/nats.h>

#include "commands.hpp"
#include "context.hpp"
#include "nats_broker.hpp"
#include "nats_holders.hpp"
#include "nats_handoff.hpp"
#include "serve_handoff.hpp"

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The options the `nats` CLI's variables give (README, q(1) ENVIRONMENT).
q::NatsCredentials credentials_from_environment() {
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

// q-nats --q-nats-holder TOKEN PID START PIDNS WATCH_FD: the helper that
// answers for a holder on the cluster (libq/nats/nats_holders.hpp), started
// by q work and receive --holder, never by hand. Ready line on fd 3.
int run_holder(char** argv) {
  q::NatsOpenOptions options;
  options.location = env("Q_NATS_HOLDER_LOCATION");
  options.credentials = credentials_from_environment();
  q::Holder holder{static_cast<std::uint32_t>(std::strtoul(argv[3], nullptr, 10)),
                   std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10)};
  return q::nats::run_nats_holder(options, argv[2], holder, std::atoi(argv[6]), 3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string_view(argv[1]) == "--q-nats-holder") return run_holder(argv);
  // A password in the location must not stay in this process's argv (ps).
  cli::reexec_without_user_info(argc, argv);
  if (cli::is_serve_command(argc, argv)) return cli::hand_over_to_q_serve(argv);
  cli::nats_opener = [](const std::string& location, q::Millis timeout) {
    q::NatsOpenOptions options;
    options.location = location;
    options.timeout = timeout;
    options.credentials = credentials_from_environment();
    return q::open_nats_broker(options);
  };
  cli::nats_library_version = [] { return nats_GetVersion(); };
  return cli::run(argc, argv);
}
