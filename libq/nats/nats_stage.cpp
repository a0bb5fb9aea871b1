#include "nats_stage.hpp"

#include <signal.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "sha256.hpp"

namespace q::nats {

std::string stage_id_prefix(const std::string& stream, Millis created_at, std::uint64_t seq) {
  // Nats-Msg-Id is a header value: a digest keeps it short and plain.
  std::string digest = sha256_hex(fmt::format("{}\n{}\n{}", stream, created_at, seq));
  return "w" + digest.substr(0, 32) + ".";
}

void kill_point(const char* point) {
  const char* at = std::getenv("Q_TEST_NATS_KILL_AT");
  if (at != nullptr && std::strcmp(at, point) == 0) ::raise(SIGKILL);
  const char* stop = std::getenv("Q_TEST_NATS_STOP_AT");
  if (stop != nullptr && std::strcmp(stop, point) == 0) ::raise(SIGSTOP);
}

}  // namespace q::nats
