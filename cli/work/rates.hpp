// Rates from the counters in the file: two `stats` snapshots a moment apart
// give messages in and out per second across every process using the queue.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace cli {

struct QueueRates {
  q::QueueStats stats;
  double in_per_s = 0;    // sent (and imported) or redriven
  double out_per_s = 0;   // acked, dead-lettered or expired
  bool measured = false;  // false on the first snapshot

  std::uint64_t backlog() const { return stats.visible + stats.in_flight + stats.delayed; }
  // backlog / (out - in); nullopt: "never" (growing or not draining)
  std::optional<q::Millis> time_to_empty() const;
};

class RateMeter {
 public:
  // Takes a snapshot of `queue` (every queue when empty) and the rates since
  // the previous snapshot.
  std::vector<QueueRates> sample(q::Broker& broker, const std::string& queue);

 private:
  struct Previous {
    q::Millis at;
    std::uint64_t in, out;
  };
  std::map<std::string, Previous> previous_;
};

// "4m12s", "1h3m", "0.4s"; "-" when there is no value.
std::string short_duration(const std::optional<q::Millis>& d);

}  // namespace cli
