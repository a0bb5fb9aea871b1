// A queue's shared rate (`q config Q --rate N/s`) on JetStream: the same GCRA
// as on a file (queue_view.hpp: one start every 1/rate, a burst of a tenth of
// a second's worth), its theoretical arrival time kept in the record
// rate.<Q> of the namespace's bucket and taken by compare-and-set **before**
// pulling; what the pull did not deliver is given back. So all consumers on
// all hosts together never start more than the rate allows.
#pragma once

#include <cstdint>
#include <string>

#include "broker.hpp"
#include "nats_client.hpp"

namespace q::nats {

class RateBudget {
 public:
  RateBudget(Client& client, const Clock& clock) : client_(client), clock_(clock) {}
  // Takes up to `want` starts from the budget of `queue` (rate > 0); returns
  // how many it took (0: none now).
  std::uint64_t take(const std::string& queue, double rate, std::uint64_t want);
  // Gives back `starts` taken but not used (best effort: lost races give up).
  void give_back(const std::string& queue, double rate, std::uint64_t starts);
  // The first time the budget allows a start.
  Millis ready_at(const std::string& queue, double rate);

  static std::string key(const std::string& queue) { return "rate." + encode_name(queue); }

 private:
  Client& client_;
  const Clock& clock_;
};

}  // namespace q::nats
