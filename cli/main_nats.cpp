// q-nats: the q command line with the NATS JetStream backend; `q` hands it
// nats:// and tls:// locations (cli/nats_handoff.hpp). File locations work here too.
#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/backends.hpp"
#include "cli/nats_handoff.hpp"
#include "cli/serve_handoff.hpp"

namespace {

// q-nats --q-nats-holder TOKEN PID START PIDNS WATCH_FD: the helper that
// answers for a holder on the cluster (libq/nats/holders.hpp), started
// by q work and receive --holder, never by hand. Ready line on fd 3.
int run_holder(char** argv) {
  q::BrokerRequest request;
  const char* location = std::getenv("Q_NATS_HOLDER_LOCATION");
  request.location = location ? location : "";
  request.credentials = cli::nats_credentials_from_environment();
  q::Holder holder{static_cast<std::uint32_t>(std::strtoul(argv[3], nullptr, 10)),
                   std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10)};
  return q::run_nats_holder_helper(request, argv[2], holder, std::atoi(argv[6]), 3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string_view(argv[1]) == "--q-nats-holder") return run_holder(argv);
  // A password in the location must not stay in this process's argv (ps).
  cli::reexec_without_user_info(argc, argv);
  if (cli::is_serve_command(argc, argv)) return cli::hand_over_to_q_serve(argv);
  q::use_nats_backend();
  int status = cli::run(argc, argv);
  // For bench/nats_speed.py: the messages this command sent the cluster.
  if (std::getenv("Q_NATS_COUNT_REQUESTS"))
    std::fprintf(stderr, "q-nats: %llu messages sent to the cluster\n",
                 static_cast<unsigned long long>(q::nats_messages_sent()));
  return status;
}
