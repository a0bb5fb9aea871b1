#include "commands.hpp"
#include "nats_handoff.hpp"

int main(int argc, char** argv) {
  if (auto location = cli::nats_location_arg(argc, argv))
    return cli::hand_over_to_q_nats(argc, argv, *location);
  return cli::run(argc, argv);
}
