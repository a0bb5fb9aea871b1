#include "cli/nats_handoff.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cli/context.hpp"
#include "libq/location.hpp"

namespace cli {
namespace {

// Where the location is: argv[index] from `offset` on, or Q_FILE (index -1).
struct Found {
  std::string location;
  int index = -1;
  std::size_t offset = 0;
};

std::optional<Found> find_location(int argc, char** argv) {
  std::optional<Found> found;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strcmp(arg, "--") == 0) break;
    if (std::strcmp(arg, "-f") == 0 || std::strcmp(arg, "--file") == 0) {
      if (i + 1 < argc) {
        ++i;
        found = Found{argv[i], i, 0};
      }
    } else if (std::strncmp(arg, "--file=", 7) == 0) {
      found = Found{arg + 7, i, 7};
    } else if (std::strncmp(arg, "-f", 2) == 0 && arg[2] != '\0') {
      found = Found{arg + 2, i, 2};
    } else if (std::strcmp(arg, "--lock-timeout") == 0) {
      ++i;
    }
  }
  if (!found) {
    const char* env = std::getenv("Q_FILE");
    if (env && *env) found = Found{env, -1, 0};
  }
  if (found && q::is_nats_location(found->location)) return found;
  return std::nullopt;
}

std::vector<char*> pointers(std::vector<std::string>& args) {
  std::vector<char*> out;
  for (auto& a : args) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::optional<std::string> nats_location_arg(int argc, char** argv) {
  if (auto found = find_location(argc, argv)) return found->location;
  return std::nullopt;
}

std::optional<std::vector<std::string>> move_user_info_to_environment(int argc, char** argv) {
  auto found = find_location(argc, argv);
  if (!found) return std::nullopt;
  q::SplitLocation split = q::split_user_info(found->location);
  if (!split.user_info || split.user_info->user.empty()) return std::nullopt;
  ::setenv("NATS_USER", split.user_info->user.c_str(), 1);
  if (split.user_info->password)
    ::setenv("NATS_PASSWORD", split.user_info->password->c_str(), 1);
  else
    ::unsetenv("NATS_PASSWORD");
  ::unsetenv("NATS_CREDS");
  ::unsetenv("NATS_NKEY");
  std::vector<std::string> args(argv, argv + argc);
  if (found->index < 0)
    ::setenv("Q_FILE", split.rest.c_str(), 1);
  else
    args[found->index] = args[found->index].substr(0, found->offset) + split.rest;
  return args;
}

std::string beside_this_executable(const std::string& name) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {};
  std::string path(self, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + name;
}

std::optional<std::string> find_q_nats() {
  std::string beside = beside_this_executable("q-nats");
  if (!beside.empty() && ::access(beside.c_str(), X_OK) == 0) return beside;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/q-nats";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

int hand_over_to_q_nats(int argc, char** argv, const std::string& location) {
  std::vector<std::string> args(argv, argv + argc);
  if (auto moved = move_user_info_to_environment(argc, argv)) args = *moved;
  std::vector<char*> new_argv = pointers(args);
  if (std::string beside = beside_this_executable("q-nats"); !beside.empty())
    ::execv(beside.c_str(), new_argv.data());
  ::execvp("q-nats", new_argv.data());
  std::cerr << "q: " << q::redact_location(location)
            << ": the NATS backend (q-nats) is not installed beside q nor "
            << "on PATH (" << std::strerror(errno) << ")\n";
  return kUnavailable;
}

void reexec_without_user_info(int argc, char** argv) {
  auto moved = move_user_info_to_environment(argc, argv);
  if (!moved) return;
  std::vector<char*> new_argv = pointers(*moved);
  ::execv("/proc/self/exe", new_argv.data());
  // Not re-run (no /proc): go on with the credentials in the environment.
}

}  // namespace cli
