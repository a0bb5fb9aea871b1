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

}  // namespace q
