// The attempt history of a message on nats:// (`q show`): the deliveries that
// ended (released, timed out, dead-lettered), the last kMaxAttempts, kept in
// the message's lease record (field "h") while it lives, in the dead letter's
// Q-History header once it dies, and in the redriven message's Q-History
// header until its first receive writes a lease again. The open delivery is
// the lease itself (pid, q work's start time). q work's command lines are
// records worker.<pid>.<since> in the bucket. ARCHITECTURE.md, "Distributed
// backend", Attempt history.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"

namespace q::nats {

nlohmann::json attempts_json(const std::vector<Attempt>& attempts);
std::vector<Attempt> attempts_from(const nlohmann::json& j);  // throws json errors
// As one header line (ASCII JSON) and back; "" is no history.
std::string attempts_header(const std::vector<Attempt>& attempts);
std::vector<Attempt> attempts_from_header(const std::string& text);
// Appends `a`, keeping the last kMaxAttempts.
void add_attempt(std::vector<Attempt>& history, Attempt a);

// q work's registry: its command line per (pid, start time).
class Workers {
 public:
  explicit Workers(Client& client) : client_(client) {}
  void add(std::uint32_t pid, Millis since, const std::string& command);
  void drop(std::uint32_t pid, Millis since);
  // "" when it is not registered (not q work, or gone).
  std::string command(std::uint32_t pid, Millis since);

 private:
  Client& client_;
  static std::string key(std::uint32_t pid, Millis since) {
    return "worker." + std::to_string(pid) + "." + std::to_string(since);
  }
};

}  // namespace q::nats
