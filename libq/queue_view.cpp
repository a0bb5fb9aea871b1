#include "queue_view.hpp"

namespace q {

Message to_message(std::uint64_t seq, const Header& h, store::Body body, MessageState state) {
  Message m;
  m.id = store::message_id(seq);
  m.body = std::move(body.body);
  m.attributes = std::move(body.attributes);
  m.dedup_id = std::move(body.dedup_id);
  m.group = h.group;
  m.receive_count = h.receive_count;
  m.state = state;
  m.sent_at = h.sent_at;
  m.visible_at = h.visible_at;
  if (h.first_received_at) m.first_received_at = h.first_received_at;
  if (h.last_received_at) m.last_received_at = h.last_received_at;
  if (h.dead_at) m.dead_at = h.dead_at;
  m.reason = h.reason;
  return m;
}

MessageState state_of(const Header& h, Millis now) {
  if (h.visible_at <= now) return MessageState::Visible;
  if (h.flags & Header::kLeased) return MessageState::InFlight;
  return MessageState::Delayed;
}

void check_outgoing(const std::string& queue, const OutgoingMessage& m) {
  check_attributes(queue, m.attributes);
  check_attribute_bytes(queue, m.attributes);
  if (m.dedup_id.size() > kMaxDedupId)
    throw Error(ErrorKind::InvalidData,
                fmt::format("queue {}: --dedup-id is {} bytes, at most {}", queue,
                            m.dedup_id.size(), kMaxDedupId));
}

// q work hands attributes to its command as environment variables, and
// execve refuses one over 128 KiB (E2BIG): a message must stay runnable.
void check_attribute_bytes(const std::string& queue, const Attributes& attributes) {
  std::size_t bytes = 0;
  for (const auto& [key, value] : attributes) bytes += key.size() + value.size();
  if (bytes > kMaxAttributeBytes)
    throw Error(ErrorKind::InvalidData,
                fmt::format("queue {}: attributes of {} bytes (keys and values), at most {}",
                            queue, bytes, kMaxAttributeBytes));
}

}  // namespace q
