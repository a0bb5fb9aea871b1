#include "libq/rules.hpp"

#include <algorithm>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/ids.hpp"
#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

namespace q {
namespace {

[[noreturn]] void refuse(ErrorKind kind, const char* field, const std::string& message) {
  throw Error(kind, message).with_field(field);
}

void check_range(const char* field, Millis value, Millis low, Millis high, const char* range) {
  if (value < low || value > high)
    refuse(ErrorKind::Usage, field,
           fmt::format("{} {}: must be between {}", field, format_duration(value), range));
}

}  // namespace

// ---- queues ------------------------------------------------------------------

bool is_valid_queue_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxQueueName) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

void check_queue_name(const std::string& name) {
  if (!is_valid_queue_name(name))
    throw Error(ErrorKind::Usage,
                fmt::format("queue name '{}': use 1 to {} letters, digits, '-', '_' or '.'", name,
                            kMaxQueueName));
}

void check_new_queue_name(const std::string& name) {
  auto bad = [&](const char* why) {
    throw Error(ErrorKind::Usage, fmt::format("queue name '{}': {}", name, why));
  };
  if (name == "." || name == "..") bad("'.' and '..' read as directories; choose another name");
  if (!name.empty() && name[0] == '-')
    bad("a name starting with '-' reads as an option; start with a letter, digit, '_' or '.'");
}

void validate(const QueueConfig& c) {
  check_range("visibility_timeout", c.visibility_timeout, 0, kMaxVisibilityTimeout, "0s and 12h");
  if (c.max_receives > kMaxMaxReceives)
    refuse(ErrorKind::Usage, "max_receives",
           fmt::format("max_receives {}: must be between 1 and {} (or 0: never dead-letter)",
                       c.max_receives, kMaxMaxReceives));
  check_range("retention", c.retention, kMinute, 365 * kDay, "1m and 365d");
  check_range("delay", c.delay, 0, kMaxDelay, "0s and 12h");
  if (c.max_depth > kMaxMaxDepth)
    refuse(ErrorKind::Usage, "max_depth",
           fmt::format("max_depth {}: must be between 0 (unlimited) and {}", c.max_depth,
                       kMaxMaxDepth));
  if (c.max_size < 1 || c.max_size > kMaxMaxSize)
    refuse(ErrorKind::Usage, "max_size",
           fmt::format("max_size {}: must be between 1 and {} bytes", c.max_size, kMaxMaxSize));
  if (c.content_dedup && !c.fifo)
    refuse(ErrorKind::Usage, "content_dedup", "content_dedup: only FIFO queues have it");
  if (!(c.rate == 0 || (c.rate >= kMinRate && c.rate <= kMaxRate)))
    refuse(ErrorKind::Usage, "rate",
           fmt::format("rate {}/s: must be 0 (no limit) or between one a year and {:.0f} per "
                       "second",
                       c.rate, kMaxRate));
  check_range("dedup_window", c.dedup_window, 0, 7 * kDay, "0s and 7d");
}

void check_agrees(const std::string& queue, const QueueConfig& have, const ConfigChange& change) {
  auto differs = [&](const char* field, auto want, auto is, auto show) {
    if (want && *want != is)
      throw Error(ErrorKind::Usage,
                  fmt::format("queue {}: already exists with {} {}", queue, field, show(is)))
          .with_field(field)
          .with_remedy(Remedy::ChangeConfig, queue, show(*want));
  };
  auto dur = [](Millis v) { return format_duration(v); };
  auto num = [](auto v) { return fmt::format("{}", v); };
  differs("visibility_timeout", change.visibility_timeout, have.visibility_timeout, dur);
  differs("max_receives", change.max_receives, have.max_receives, num);
  differs("retention", change.retention, have.retention, dur);
  differs("delay", change.delay, have.delay, dur);
  differs("max_depth", change.max_depth, have.max_depth, num);
  differs("max_size", change.max_size, have.max_size, num);
  differs("dedup_window", change.dedup_window, have.dedup_window, dur);
  differs("rate", change.rate, have.rate, [](double v) { return fmt::format("{}/s", v); });
  if (change.fifo && *change.fifo != have.fifo)
    throw Error(ErrorKind::Usage,
                fmt::format("queue {}: already exists as a {} queue, and a queue's kind cannot "
                            "change",
                            queue, have.fifo ? "FIFO" : "standard"));
  auto flag = [](bool v) { return v ? "on" : "off"; };
  differs("content_dedup", change.content_dedup, have.content_dedup, flag);
}

void check_capabilities(const Capabilities& can, const ConfigChange& change) {
  if (change.max_size && *change.max_size > can.max_size)
    refuse(ErrorKind::Usage, "max_size",
           fmt::format("max_size {}: over the {} bytes this backend can hold{}{}", *change.max_size,
                       can.max_size, can.max_size_source.empty() ? "" : ": ", can.max_size_source));
}

void check_kind_kept(const std::string& queue, const QueueConfig& have,
                     const ConfigChange& change) {
  if (change.fifo && *change.fifo != have.fifo)
    refuse(ErrorKind::Usage, "fifo",
           fmt::format("queue {}: is a {} queue, and a queue's kind cannot change; create a new "
                       "queue{} and move the messages",
                       queue, have.fifo ? "FIFO" : "standard", have.fifo ? "" : " with fifo"));
}

// ---- messages ----------------------------------------------------------------

void check_attributes(const std::string& queue, const Attributes& attributes) {
  auto bad = [&](const std::string& why) {
    throw Error(ErrorKind::InvalidData, fmt::format("queue {}: {}", queue, why));
  };
  if (attributes.size() > kMaxAttributes)
    bad(fmt::format("{}, at most {}", plural(attributes.size(), "attribute"), kMaxAttributes));
  std::set<std::string_view> seen;
  for (const auto& [key, value] : attributes) {
    if (key.empty() || key.size() > kMaxAttributeKey)
      bad(fmt::format("attribute key '{}': must be 1 to {} bytes", key, kMaxAttributeKey));
    if (!is_utf8(key)) bad(fmt::format("attribute key '{}': not UTF-8 text", key));
    if (!is_utf8(value))
      bad(fmt::format("attribute {}: the value is not UTF-8 text (put binary data in the body)",
                      key));
    if (!seen.insert(key).second) bad(fmt::format("attribute {}: given twice", key));
  }
}

void check_attribute_bytes(const std::string& queue, const Attributes& attributes) {
  std::size_t bytes = 0;
  for (const auto& [key, value] : attributes) bytes += key.size() + value.size();
  if (bytes > kMaxAttributeBytes)
    throw Error(ErrorKind::InvalidData,
                fmt::format("queue {}: attributes of {} bytes (keys and values), at most {}", queue,
                            bytes, kMaxAttributeBytes));
}

void check_outgoing(const std::string& queue, const OutgoingMessage& m) {
  check_attributes(queue, m.attributes);
  check_attribute_bytes(queue, m.attributes);
  if (m.dedup_id.size() > kMaxDedupId)
    refuse(ErrorKind::InvalidData, "dedup_id",
           fmt::format("queue {}: dedup_id is {} bytes, at most {}", queue, m.dedup_id.size(),
                       kMaxDedupId));
  // JSON output and export carry the dedup id as text.
  if (!is_utf8(m.dedup_id))
    refuse(ErrorKind::InvalidData, "dedup_id",
           fmt::format("queue {}: dedup_id: must be UTF-8 text", queue));
  if (m.group.size() > kMaxGroupId ||
      !std::all_of(m.group.begin(), m.group.end(),
                   [](unsigned char c) { return c > 0x20 && c < 0x7F; }))
    refuse(ErrorKind::InvalidData, "group",
           fmt::format("group '{}': use 1 to {} printable ASCII characters, no spaces", m.group,
                       kMaxGroupId));
}

void check_send_against(const std::string& queue, const QueueConfig& config,
                        const std::vector<OutgoingMessage>& messages, const SendOptions& options) {
  for (const auto& m : messages) {
    if (!config.fifo && !m.group.empty())
      refuse(
          ErrorKind::Usage, "group",
          fmt::format("queue {}: group applies to FIFO queues only (this one is standard)", queue));
    if (config.fifo && m.group.empty())
      refuse(ErrorKind::Usage, "group",
             fmt::format("queue {}: is a FIFO queue: every message needs group ID", queue));
  }
  if (config.fifo && (options.delay || options.at))
    refuse(ErrorKind::Usage, "delay",
           fmt::format("queue {}: a FIFO queue delivers each group in send order, so one "
                       "message cannot be delayed on its own (as in SQS); set the queue's "
                       "delay instead",
                       queue));
  std::size_t index = 0;
  for (const auto& m : messages)
    check_body_size(queue, config, m.body.size(), fmt::format("message {}", ++index), "sent");
}

void check_body_size(const std::string& queue, const QueueConfig& config, std::size_t bytes,
                     const std::string& what, const std::string& nothing_done) {
  if (bytes > config.max_size)
    throw Error(ErrorKind::InvalidData,
                fmt::format("queue {}: {} is {} bytes, over the queue's max size of {} bytes; "
                            "nothing was {}",
                            queue, what, bytes, config.max_size, nothing_done));
}

// ---- deliveries --------------------------------------------------------------

void check_receive(const ReceiveOptions& options) {
  if (options.visibility_timeout &&
      (*options.visibility_timeout < 0 || *options.visibility_timeout > kMaxVisibilityTimeout))
    refuse(ErrorKind::Usage, "visibility_timeout",
           "visibility_timeout: must be between 0s and 12h");
}

void check_receipt(const std::string& receipt) {
  if (!q::parse_receipt(receipt))
    throw Error(ErrorKind::InvalidData,
                fmt::format("receipt '{}': malformed (expected the receipt of a receive, like "
                            "m1f.0123456789abcdef)",
                            receipt));
}

void check_extend_by(Millis by) { check_range("by", by, 0, kMaxVisibilityTimeout, "0s and 12h"); }

void check_extend_limit(const std::string& receipt, Millis until, Millis last_received_at) {
  Millis limit = last_received_at + kMaxVisibilityTimeout;
  if (until > limit)
    throw Error(ErrorKind::InvalidData,
                fmt::format("receipt {}: cannot extend to {}: a message may be held at most 12h "
                            "after its receive (until {})",
                            receipt, format_time(until), format_time(limit)));
}

void check_nack(const NackOptions& options) {
  check_range("delay", options.delay, 0, kMaxDelay, "0s and 12h");
  if (options.reason.size() > kMaxReason)
    refuse(ErrorKind::InvalidData, "reason",
           fmt::format("reason: {} bytes, at most {} are kept", options.reason.size(), kMaxReason));
}

void check_idempotency_key(const std::string& key) {
  if (key.empty() || key.size() > kMaxIdempotencyKey)
    throw Error(ErrorKind::InvalidData, fmt::format("idempotency key of {} bytes: must be 1 to {}",
                                                    key.size(), kMaxIdempotencyKey));
}

std::uint64_t parse_id(const std::string& id, const char* field) {
  auto seq = q::parse_message_id(id);
  if (seq) return *seq;
  if (field)
    refuse(ErrorKind::InvalidData, field,
           fmt::format("{} {}: not a message identifier (like m1f)", field, id));
  throw Error(ErrorKind::InvalidData, fmt::format("'{}': not a message id (like m1f)", id));
}

}  // namespace q
