// A queue's shared rate (`q config Q --rate N/s`) on JetStream: the same
// limiter and rules as on a file (rate_limiter.hpp, shared_rate), its
// theoretical arrival time and the rate it was earned at kept in the record
// rate.<Q> of the namespace's bucket and taken by compare-and-set **before**
// pulling; what the pull did not deliver is given back. So all consumers on
// all hosts together never start more than the rate allows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"

namespace q::nats {

class RateBudget {
 public:
  RateBudget(Client& client, const Clock& clock) : client_(client), clock_(clock) {}
  // Takes up to `want` starts from the budget of `queue` (rate > 0); returns
  // how many it took (0: none now).
  std::uint64_t take(const std::string& queue, double rate, std::uint64_t want);
  // Gives back `starts` of the last take() for `queue` that were not used,
  // only while nobody took since (the record is still at the revision that
  // take wrote): a give-back after another's take would move the arrival time
  // back under that take's starts and let a third start at once, over the
  // rate. So a budget is never given back twice over; at worst a start is
  // lost (the rate is under-used, never exceeded).
  void give_back(const std::string& queue, double rate, std::uint64_t starts);
  // The first time the budget allows a start.
  Millis ready_at(const std::string& queue, double rate);

  static std::string key(const std::string& queue) { return "rate." + encode_name(queue); }

 private:
  Client& client_;
  const Clock& clock_;
  // The compare-and-set of the budget record (put_if).
  std::optional<std::uint64_t> update(const std::string& queue, const std::string& value,
                                      std::uint64_t revision);
  std::map<std::string, std::uint64_t> taken_at_;  // queue: the revision its last take wrote
};

}  // namespace q::nats
