// q-serve: the q command line with the SQS endpoint (cli/serve/), and the NATS
// backend when it is built; `q serve` is handed here (cli/serve_handoff.hpp).
#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/serve/server.hpp"
#include "cli/serve_handoff.hpp"
#ifdef Q_SERVE_NATS
#include "libq/backends.hpp"
#endif

int main(int argc, char** argv) {
  cli::serve_runner = serve::serve;
#ifdef Q_SERVE_NATS
  q::use_nats_backend();
#endif
  return cli::run(argc, argv);
}
