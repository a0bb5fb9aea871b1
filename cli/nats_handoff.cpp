#include "nats_handoff.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "context.hpp"

namespace cli {

std::optional<std::string> nats_location_arg(int argc, char** argv) {
  std::optional<std::string> file;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strcmp(arg, "--") == 0) break;
    if (std::strcmp(arg, "-f") == 0 || std::strcmp(arg, "--file") == 0) {
      if (i + 1 < argc) file = argv[++i];
    } else if (std::strncmp(arg, "--file=", 7) == 0) {
      file = arg + 7;
    } else if (std::strncmp(arg, "-f", 2) == 0 && arg[2] != '\0') {
      file = arg + 2;
    } else if (std::strcmp(arg, "--lock-timeout") == 0) {
      ++i;
    }
  }
  if (!file) {
    const char* env = std::getenv("Q_FILE");
    if (env && *env) file = env;
  }
  if (file && is_nats_location(*file)) return file;
  return std::nullopt;
}

int hand_over_to_q_nats(int, char** argv, const std::string& location) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    std::string beside(self);
    beside = beside.substr(0, beside.rfind('/') + 1) + "q-nats";
    ::execv(beside.c_str(), argv);
  }
  ::execvp("q-nats", argv);
  std::cerr << "q: " << location << ": the NATS backend (q-nats) is not installed beside q nor "
            << "on PATH (" << std::strerror(errno) << ")\n";
  return kUnavailable;
}

}  // namespace cli
