#include "libq/nats/delay.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "libq/timefmt.hpp"

namespace q::nats {

Millis send_visible_at(const std::string& queue, const QueueConfig& config,
                       const SendOptions& options, Millis now) {
  Millis visible_at = now + config.delay;
  if (options.delay) visible_at = now + *options.delay;
  if (options.at) visible_at = std::max(now, *options.at);
  if (visible_at - now >= config.retention)
    throw Error(ErrorKind::InvalidData,
                fmt::format("queue {}: a message visible at {} is further ahead than the "
                            "queue's retention ({})",
                            queue, format_time(visible_at), format_duration(config.retention)));
  return visible_at;
}

Lease delayed_lease(Millis until) {
  Lease l;
  l.state = Lease::Released;
  l.until = until;
  return l;
}

Millis header_visible_at(natsMsg* msg) {
  std::string v = header(msg, kVisibleAtHeader);
  if (v.empty()) return 0;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return 0;
  }
}

void mark_delayed(Client& client, const std::string& queue, const std::vector<std::uint64_t>& seqs,
                  Millis until) {
  // One CAS create per message ("absent"); losing means a receive saw the
  // message first and wrote the same lease from its header.
  for (std::uint64_t seq : seqs)
    client.put_if(Names::lease_key(queue, seq), delayed_lease(until).encode(), 0);
}

}  // namespace q::nats
