#include "libq/nats/stage.hpp"

#include <signal.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "libq/sha256.hpp"

namespace q::nats {

std::string stage_id_prefix(const std::string& stream, Millis created_at, std::uint64_t seq) {
  // Nats-Msg-Id is a header value: a digest keeps it short and plain.
  std::string digest = sha256_hex(fmt::format("{}\n{}\n{}", stream, created_at, seq));
  return "w" + digest.substr(0, 32) + ".";
}

namespace {
// `list` (comma-separated) names `point`.
bool names(const char* list, const char* point) {
  if (list == nullptr) return false;
  const std::size_t n = std::strlen(point);
  for (const char* p = list; *p;) {
    const char* end = std::strchr(p, ',');
    std::size_t len = end ? static_cast<std::size_t>(end - p) : std::strlen(p);
    if (len == n && std::strncmp(p, point, n) == 0) return true;
    if (!end) break;
    p = end + 1;
  }
  return false;
}
}  // namespace

void kill_point(const char* point) {
  if (names(std::getenv("Q_TEST_NATS_KILL_AT"), point)) ::raise(SIGKILL);
  if (names(std::getenv("Q_TEST_NATS_STOP_AT"), point)) ::raise(SIGSTOP);
}

}  // namespace q::nats
