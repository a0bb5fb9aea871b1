#include "nats_rate.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace q::nats {
namespace {
using json = nlohmann::json;

struct Gcra {
  double interval_us;
  double tolerance_us;
  explicit Gcra(double rate)
      : interval_us(1e6 / rate), tolerance_us(1e6 / rate * std::floor(rate / 10)) {}
  // The stored arrival time, never further ahead than a burst and an interval
  // (a consumer whose clock ran ahead must not hold back everyone else).
  double tat(double stored, double now_us) const {
    return std::min(std::max(stored, now_us), now_us + tolerance_us + interval_us);
  }
};

double read_tat(const std::optional<Record>& r) {
  if (!r) return 0;
  auto j = json::parse(r->value, nullptr, false);
  return j.is_discarded() ? 0 : j.value("tat_us", 0.0);
}

std::string encode(double tat) { return json{{"tat_us", tat}, {"w", random_token()}}.dump(); }

}  // namespace

// The budget's compare-and-set is exact on a cluster through put_if's claim
// (nats_client.cpp says why it needs one).
std::optional<std::uint64_t> RateBudget::update(const std::string& queue, const std::string& value,
                                                std::uint64_t revision) {
  return client_.put_if(key(queue), value, revision);
}

std::uint64_t RateBudget::take(const std::string& queue, double rate, std::uint64_t want) {
  Gcra g(rate);
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto r = client_.get(key(queue));
    double now_us = static_cast<double>(clock_.now()) * 1000;
    double tat = g.tat(read_tat(r), now_us);
    if (tat > now_us + g.tolerance_us) return 0;
    auto allows = static_cast<std::uint64_t>((now_us + g.tolerance_us - tat) / g.interval_us) + 1;
    std::uint64_t n = std::min(want, allows);
    if (auto rev = update(queue, encode(tat + g.interval_us * static_cast<double>(n)),
                          r ? r->revision : 0)) {
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
  Gcra g(rate);
  auto r = client_.get(key(queue));
  if (!r || r->revision != revision) return;  // another took since: keep its starts apart
  double tat = read_tat(r) - g.interval_us * static_cast<double>(starts);
  update(queue, encode(tat), revision);
}

Millis RateBudget::ready_at(const std::string& queue, double rate) {
  Gcra g(rate);
  double now_us = static_cast<double>(clock_.now()) * 1000;
  double at_us = g.tat(read_tat(client_.get(key(queue))), now_us) - g.tolerance_us;
  return static_cast<Millis>(std::ceil(at_us / 1000));
}

}  // namespace q::nats
