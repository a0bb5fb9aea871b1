#include "cli/serve_handoff.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/context.hpp"
#include "cli/nats_handoff.hpp"

namespace cli {

ServeRunner serve_runner = nullptr;

bool is_serve_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-f" || arg == "--file" || arg == "--lock-timeout") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] == '-') continue;
    return arg == "serve";
  }
  return false;
}

int hand_over_to_q_serve(char** argv) {
  if (std::string beside = beside_this_executable("q-serve"); !beside.empty())
    ::execv(beside.c_str(), argv);
  ::execvp("q-serve", argv);
  std::cerr << "q serve: the SQS endpoint (q-serve) is not installed beside q nor on PATH ("
            << std::strerror(errno) << ")\n";
  return kUnavailable;
}

}  // namespace cli
