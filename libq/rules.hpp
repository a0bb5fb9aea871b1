// The rules of a request that do not depend on where messages are kept: names,
// ranges, limits, receipt syntax, what a queue kind refuses. Every Broker goes
// through them: Broker's public methods check a request before they hand it to
// the backend's do_* (broker.cpp), and a backend calls the rules that need the
// queue's settings (check_send_against, check_extend_limit, ...) once it has
// loaded them. Errors name the field (`visibility_timeout`), see error.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace q {

// ---- queues ------------------------------------------------------------------

// Queue names: 1 to 80 of letters, digits, '-', '_' and '.'.
bool is_valid_queue_name(const std::string& name);
// Throws Error(Usage) unless is_valid_queue_name.
void check_queue_name(const std::string& name);
// A queue being created must also not be "." or ".." (they read as paths) nor
// start with '-' (it reads as an option: `for q in $(q list)` breaks). Queues
// of older files with such names stay usable; only new ones are refused.
// Throws Error(Usage) saying why.
void check_new_queue_name(const std::string& name);

// Throws Error(Usage) naming the setting when a value is out of range.
void validate(const QueueConfig& config);
// A create naming settings of an existing queue: each must agree with `have`.
// Throws Error(Usage, Remedy::ChangeConfig) naming the first that does not.
void check_agrees(const std::string& queue, const QueueConfig& have, const ConfigChange& change);
// The settings a create or config names must fit what the backend can store:
// a max_size over Capabilities::max_size is refused (Error(Usage) naming
// max_size, the backend's limit and where it comes from).
void check_capabilities(const Capabilities& can, const ConfigChange& change);
// A queue's kind (FIFO or standard) is fixed when it is created.
void check_kind_kept(const std::string& queue, const QueueConfig& have, const ConfigChange& change);

// ---- messages ----------------------------------------------------------------

// Attributes a message may carry: at most kMaxAttributes, keys 1 to
// kMaxAttributeKey bytes, keys and values valid UTF-8 (they are text in JSON
// and in `q work`'s environment), each key once. Throws Error(InvalidData)
// naming the queue and the attribute.
void check_attributes(const std::string& queue, const Attributes& attributes);
// Keys and values together at most kMaxAttributeBytes: q work hands them to
// its command as environment variables, and execve refuses one over 128 KiB.
void check_attribute_bytes(const std::string& queue, const Attributes& attributes);
// A message as a send or import brings it, before any queue is looked at:
// attributes, dedup id (at most kMaxDedupId bytes of UTF-8), group syntax.
void check_outgoing(const std::string& queue, const OutgoingMessage& m);
// A send checked against the queue's settings: groups on FIFO queues only and
// there always, no per-message delay on a FIFO queue.
void check_send_against(const std::string& queue, const QueueConfig& config,
                        const std::vector<OutgoingMessage>& messages, const SendOptions& options);
// The body fits the queue's max size; `what` names the message in the error.
void check_body_size(const std::string& queue, const QueueConfig& config, std::size_t bytes,
                     const std::string& what, const std::string& nothing_done);

// ---- deliveries --------------------------------------------------------------

void check_receive(const ReceiveOptions& options);
// Throws Error(InvalidData) unless `receipt` has the syntax of a receipt.
void check_receipt(const std::string& receipt);
// `by`: 0 to 12 h.
void check_extend_by(Millis by);
// A message may be held at most 12 h after its receive.
void check_extend_limit(const std::string& receipt, Millis until, Millis last_received_at);
void check_nack(const NackOptions& options);
void check_idempotency_key(const std::string& key);
// A message id as printed (m1f); `field` names where it came from.
// Throws Error(InvalidData) naming `field` (or, without one, the id).
std::uint64_t parse_id(const std::string& id, const char* field = nullptr);

}  // namespace q
