#include "cli/commands.hpp"
#include "cli/nats_handoff.hpp"
#include "cli/serve_handoff.hpp"

int main(int argc, char** argv) {
  if (cli::is_serve_command(argc, argv)) return cli::hand_over_to_q_serve(argv);
  if (auto location = cli::nats_location_arg(argc, argv))
    return cli::hand_over_to_q_nats(argc, argv, *location);
  return cli::run(argc, argv);
}
