#include "libq/nats/rate.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/rate_limiter.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;

// The stored budget and the rate it was earned at; a record written before
// the rate was kept with it counts as another rate's (nothing).
SharedRate read_budget(const std::optional<Record>& r) {
  if (!r) return {};
  auto j = json::parse(r->value, nullptr, false);
  if (j.is_discarded()) return {};
  return {j.value("rate", 0.0), j.value("tat_us", 0.0)};
}

std::string encode(double rate, double tat) {
  return json{{"rate", rate}, {"tat_us", tat}, {"w", random_token()}}.dump();
}

}  // namespace

// The budget's compare-and-set is exact on a cluster through put_if's claim
// (nats/client.cpp says why it needs one).
std::optional<std::uint64_t> RateBudget::update(const std::string& queue, const std::string& value,
                                                std::uint64_t revision) {
  return client_.put_if(key(queue), value, revision);
}

// The rules (a budget of another rate is void, a future is pulled back) are
// shared_rate's, the same as on a file (rate_limiter.hpp).
std::uint64_t RateBudget::take(const std::string& queue, double rate, std::uint64_t want) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto r = client_.get(key(queue));
    const SharedRate kept = read_budget(r);
    RateLimiter budget = shared_rate(rate, kept);
    Millis now = clock_.now();
    budget.settle(now);
    std::uint64_t n = std::min(want, budget.allows(now));
    // Nothing to take: the budget is written only when the rule changed it
    // (another rate's, or a future pulled back), so that the next take finds
    // it settled; else nothing is written.
    if (n == 0 && r && kept.rate == rate && kept.tat_us == budget.tat_us()) return 0;
    budget.take(now, n);
    if (auto rev = update(queue, encode(rate, budget.tat_us()), r ? r->revision : 0)) {
      if (n == 0) return 0;
      taken_at_[queue] = *rev;
      return n;
    }
  }
  return 0;  // others kept taking: nothing this time
}

void RateBudget::give_back(const std::string& queue, double rate, std::uint64_t starts) {
  auto taken = taken_at_.find(queue);
  if (starts == 0 || taken == taken_at_.end()) return;
  std::uint64_t revision = taken->second;
  taken_at_.erase(taken);
  auto r = client_.get(key(queue));
  if (!r || r->revision != revision) return;  // another took since: keep its starts apart
  RateLimiter budget = shared_rate(rate, read_budget(r));
  budget.give_back(starts);
  update(queue, encode(rate, budget.tat_us()), revision);
}

Millis RateBudget::ready_at(const std::string& queue, double rate) {
  RateLimiter budget = shared_rate(rate, read_budget(client_.get(key(queue))));
  Millis now = clock_.now();
  budget.settle(now);
  return budget.ready_at(now);
}

}  // namespace q::nats
