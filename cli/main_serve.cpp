// q-serve: the q command line with the SQS endpoint (cli/serve/), and the NATS
// backend when it is built; `q serve` is handed here (cli/serve_handoff.hpp).
#include "commands.hpp"
#include "context.hpp"
#include "serve/server.hpp"
#include "serve_handoff.hpp"
#ifdef Q_SERVE_NATS
#include "nats_broker.hpp"
#endif

int main(int argc, char** argv) {
  cli::serve_runner = serve::serve;
#ifdef Q_SERVE_NATS
  cli::nats_opener = [](const std::string& location, q::Millis timeout) {
    q::NatsOpenOptions options;
    options.location = location;
    options.timeout = timeout;
    return q::open_nats_broker(options);
  };
#endif
  return cli::run(argc, argv);
}
