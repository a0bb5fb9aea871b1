#include "cli/work/rates.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace cli {

std::optional<q::Millis> QueueRates::time_to_empty() const {
  if (backlog() == 0) return 0;
  double drain = out_per_s - in_per_s;
  if (!measured || drain <= 0) return std::nullopt;
  return static_cast<q::Millis>(static_cast<double>(backlog()) / drain * 1000);
}

std::vector<QueueRates> RateMeter::sample(q::Broker& broker, const std::string& queue) {
  using namespace std::chrono;
  q::Millis now = duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  std::vector<QueueRates> out;
  for (auto& s : broker.stats(queue)) {
    QueueRates r;
    // In: sent (imports of live messages count as sent) and redriven back.
    std::uint64_t in = s.counters.sent + s.counters.redriven;
    std::uint64_t gone = s.counters.acked + s.counters.dead_lettered + s.counters.expired;
    auto prev = previous_.find(s.name);
    if (prev != previous_.end() && now > prev->second.at) {
      double seconds = static_cast<double>(now - prev->second.at) / 1000.0;
      r.in_per_s = static_cast<double>(in - std::min(in, prev->second.in)) / seconds;
      r.out_per_s = static_cast<double>(gone - std::min(gone, prev->second.out)) / seconds;
      r.measured = true;
    }
    previous_[s.name] = Previous{now, in, gone};
    r.stats = std::move(s);
    out.push_back(std::move(r));
  }
  return out;
}

std::string short_duration(const std::optional<q::Millis>& d) {
  if (!d) return "-";
  q::Millis a = *d;
  if (a < q::kMinute) return fmt::format("{:.1f}s", static_cast<double>(a) / q::kSecond);
  if (a < q::kHour) return fmt::format("{}m{}s", a / q::kMinute, a % q::kMinute / q::kSecond);
  if (a < q::kDay) return fmt::format("{}h{}m", a / q::kHour, a % q::kHour / q::kMinute);
  return fmt::format("{}d{}h", a / q::kDay, a % q::kDay / q::kHour);
}

}  // namespace cli
