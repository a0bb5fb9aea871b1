// q-nats: the q command line with the NATS JetStream backend; `q` hands it
// nats:// locations (cli/nats_handoff.hpp). File locations work here too.
#include "commands.hpp"
#include "context.hpp"
#include "nats_broker.hpp"
#include "serve_handoff.hpp"

int main(int argc, char** argv) {
  if (cli::is_serve_command(argc, argv)) return cli::hand_over_to_q_serve(argv);
  cli::nats_opener = [](const std::string& location, q::Millis timeout) {
    q::NatsOpenOptions options;
    options.location = location;
    options.timeout = timeout;
    return q::open_nats_broker(options);
  };
  return cli::run(argc, argv);
}
