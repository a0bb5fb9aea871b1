// q-nats: the q command line with the NATS JetStream backend; `q` hands it
// nats:// and tls:// locations (cli/nats_handoff.hpp). File locations work here too.
#include <cstdlib>

#include <nats/nats.h>

#include "commands.hpp"
#include "context.hpp"
#include "nats_broker.hpp"
#include "nats_handoff.hpp"
#include "serve_handoff.hpp"

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

int main(int argc, char** argv) {
  // A password in the location must not stay in this process's argv (ps).
  cli::reexec_without_user_info(argc, argv);
  if (cli::is_serve_command(argc, argv)) return cli::hand_over_to_q_serve(argv);
  cli::nats_opener = [](const std::string& location, q::Millis timeout) {
    q::NatsOpenOptions options;
    options.location = location;
    options.timeout = timeout;
    // The `nats` CLI's variables (README, q(1) ENVIRONMENT).
    options.credentials.user = env("NATS_USER");
    options.credentials.password = env("NATS_PASSWORD");
    options.credentials.creds = env("NATS_CREDS");
    options.credentials.nkey = env("NATS_NKEY");
    options.credentials.ca = env("NATS_CA");
    options.credentials.cert = env("NATS_CERT");
    options.credentials.key = env("NATS_KEY");
    return q::open_nats_broker(options);
  };
  cli::nats_library_version = [] { return nats_GetVersion(); };
  return cli::run(argc, argv);
}
