// The queue operations the CLI needs, independent of where messages are kept.
// LmdbBroker (lmdb_broker.hpp) is the one backend today; a backend on a
// distributed engine would implement the same interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clock.hpp"

namespace q {

// Limits and defaults follow Amazon SQS where it has an answer.
constexpr Millis kMaxVisibilityTimeout = 12 * kHour;
constexpr Millis kMaxDelay = 12 * kHour;  // SQS allows 15 min; we schedule further out
constexpr Millis kDeadLetterRetention = 14 * kDay;
constexpr std::uint32_t kMaxMaxReceives = 1000;
constexpr std::size_t kMaxQueueName = 80;
constexpr std::size_t kMaxDedupId = 128;
constexpr std::size_t kMaxReason = 4096;
constexpr std::size_t kMaxAttributes = 64;
constexpr std::size_t kMaxAttributeKey = 256;
constexpr std::size_t kMaxAttributeBytes = 64 * 1024;  // all keys and values of a message
constexpr std::uint32_t kMaxMaxSize = 256u * 1024 * 1024;
constexpr std::size_t kMaxIdempotencyKey = 256;
constexpr std::size_t kMaxGroupId = 128;
constexpr double kMaxRate = 1e6;
// Far beyond any queue; keeps the depth a positive number in JSON.
constexpr std::uint64_t kMaxMaxDepth = 1'000'000'000'000'000;
// The slowest rate other than 0 (no limit): one start a year. Below it the
// interval between starts (1/rate) would not fit the clock's numbers.
constexpr double kMinRate = 1.0 / (365.0 * 24 * 3600);

struct QueueConfig {
  Millis visibility_timeout = 30 * kSecond;
  std::uint32_t max_receives = 5;  // 0: never dead-letter
  Millis retention = 4 * kDay;
  Millis delay = 0;
  std::uint64_t max_depth = 0;  // 0: unlimited
  std::uint32_t max_size = 1024 * 1024;  // body bytes
  Millis dedup_window = 5 * kMinute;
  // Messages per second that all rate-limited consumers together may start
  // (`q work`); 0: no limit.
  double rate = 0;
  // A FIFO queue delivers each message group in send order, one delivery of a
  // group at a time. Fixed when the queue is created.
  bool fifo = false;
  // FIFO: without a --dedup-id, the SHA-256 of the body is the dedup id.
  bool content_dedup = false;
};

// The settings a `create` or `config` names; unset fields stay as they are.
struct ConfigChange {
  std::optional<Millis> visibility_timeout;
  std::optional<std::uint32_t> max_receives;
  std::optional<Millis> retention;
  std::optional<Millis> delay;
  std::optional<std::uint64_t> max_depth;
  std::optional<std::uint32_t> max_size;
  std::optional<Millis> dedup_window;
  std::optional<double> rate;
  std::optional<bool> fifo;
  std::optional<bool> content_dedup;

  bool empty() const {
    return !visibility_timeout && !max_receives && !retention && !delay && !max_depth &&
           !max_size && !dedup_window && !rate && !fifo && !content_dedup;
  }
};

// Throws Error(Usage) naming the setting when a value is out of range.
void validate(const QueueConfig& config);
QueueConfig apply(QueueConfig config, const ConfigChange& change);
// Throws Error(Usage) when `change` names a setting that differs from the
// existing queue's (a `create` of a queue that exists).
void check_agrees(const std::string& queue, const QueueConfig& have, const ConfigChange& change);

// Lifetime counters of a queue: they only grow.
struct QueueCounters {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  std::uint64_t acked = 0;
  std::uint64_t nacked = 0;
  std::uint64_t dead_lettered = 0;
  std::uint64_t redriven = 0;
  std::uint64_t expired = 0;
  std::uint64_t deduplicated = 0;
};

struct QueueStats {
  std::string name;
  QueueConfig config;
  Millis created_at = 0;
  std::uint64_t visible = 0;
  std::uint64_t in_flight = 0;
  std::uint64_t delayed = 0;
  std::uint64_t dead = 0;
  // Age of the oldest message that is visible or in flight; none when there is none.
  std::optional<Millis> oldest_age;
  // FIFO queues: groups with messages, and those held by a delivery in flight.
  std::uint64_t groups = 0;
  std::uint64_t held_groups = 0;
  QueueCounters counters;
};

using Attributes = std::vector<std::pair<std::string, std::string>>;

struct OutgoingMessage {
  std::string body;
  Attributes attributes;
  std::string dedup_id;  // empty: none
  std::string group{};   // FIFO queues: the message group (required there)
};

struct SendOptions {
  std::optional<Millis> delay;  // overrides the queue's delay
  std::optional<Millis> at;     // absolute time the message becomes visible
  bool create_queue = false;    // create a missing queue with default settings
};

struct SendResult {
  std::string id;
  bool duplicate = false;  // an earlier message with the same dedup id stands
};

enum class MessageState { Visible, InFlight, Delayed, Dead };
const char* to_string(MessageState state);

struct Message {
  std::string id;
  std::string receipt;  // only on a delivery
  std::string body;
  Attributes attributes;
  std::uint32_t receive_count = 0;
  MessageState state = MessageState::Visible;
  Millis sent_at = 0;
  Millis visible_at = 0;
  std::optional<Millis> first_received_at;
  std::optional<Millis> last_received_at;
  std::optional<Millis> dead_at;
  std::string reason;  // the last nack reason, or why it was dead-lettered
  std::string dedup_id;
  std::string group;  // FIFO queues
};

struct ReceiveOptions {
  std::uint32_t max_messages = 1;
  std::optional<Millis> visibility_timeout;  // overrides the queue's
  Millis wait = 0;                           // long poll: block up to this long
  // Take from the queue's shared rate budget (QueueConfig::rate): at most as
  // many messages as it allows now; with `wait`, wait for the budget too.
  bool rate_limited = false;
  // FIFO: at most one message of any group (for consumers that run messages
  // concurrently and must not run two of one group at once).
  bool one_per_group = false;
};

enum class ReceiptOutcome { Done, Stale, Malformed };

struct ReceiptResult {
  std::string receipt;
  ReceiptOutcome outcome = ReceiptOutcome::Done;
  std::string detail;  // why it was stale or malformed
};

struct NackOptions {
  Millis delay = 0;
  bool backoff = false;
  Millis backoff_base = 1 * kSecond;
  Millis backoff_cap = 15 * kMinute;
  std::string reason;
};

struct RedriveOptions {
  std::vector<std::string> ids;           // empty: all, oldest first
  std::optional<std::uint64_t> max;       // at most this many
  bool dry_run = false;
  std::string to;                         // another queue to move them to; empty: their own
  // Ids that are no longer dead letters (redriven, deleted or expired since
  // they were chosen) are passed over instead of failing the whole call.
  bool skip_missing = false;
};

struct RemovedCounts {
  std::uint64_t messages = 0;
  std::uint64_t dead_letters = 0;
};

// Readable when the queue file may have changed (any process committed), for
// consumers that wait in their own event loop.
class ChangeWatch {
 public:
  virtual ~ChangeWatch() = default;
  virtual int fd() const = 0;  // -1: none; poll instead
  virtual void drain() = 0;    // call when fd() was readable
};

class Broker {
 public:
  virtual ~Broker() = default;

  // Creates the queue; an existing queue is fine when `change` agrees with it.
  // Returns true when the queue was created.
  virtual bool create_queue(const std::string& queue, const ConfigChange& change) = 0;
  virtual QueueConfig configure(const std::string& queue, const ConfigChange& change) = 0;
  virtual RemovedCounts delete_queue(const std::string& queue) = 0;
  virtual std::vector<std::string> list_queues() = 0;

  virtual std::vector<SendResult> send(const std::string& queue,
                                       std::vector<OutgoingMessage> messages,
                                       const SendOptions& options) = 0;
  // Empty when nothing became visible within options.wait.
  virtual std::vector<Message> receive(const std::string& queue,
                                       const ReceiveOptions& options) = 0;
  virtual std::vector<ReceiptResult> ack(const std::string& queue,
                                         const std::vector<std::string>& receipts) = 0;
  // Throw Error(Stale) or Error(InvalidData) for a stale or malformed receipt.
  // extend returns the new visible-until time.
  virtual Millis extend(const std::string& queue, const std::string& receipt, Millis by) = 0;
  virtual Millis nack(const std::string& queue, const std::string& receipt,
                      const NackOptions& options) = 0;
  // Moves the delivered message to the dead-letter queue at once.
  virtual void dead_letter(const std::string& queue, const std::string& receipt,
                           const std::string& reason) = 0;

  // Idempotency records of consumers: ack_done acks and records `key` as done
  // until now + keep, in one transaction; is_done tells whether it is.
  virtual ReceiptOutcome ack_done(const std::string& queue, const std::string& receipt,
                                  const std::string& key, Millis keep) = 0;
  virtual bool is_done(const std::string& queue, const std::string& key) = 0;

  // When a receive could next get a message: now or earlier when one is
  // visible (and, with rate_limited, the rate budget allows); INT64_MAX: not
  // before something changes.
  virtual Millis next_delivery(const std::string& queue, bool rate_limited) = 0;
  virtual std::unique_ptr<ChangeWatch> watch() = 0;

  virtual std::vector<Message> peek(const std::string& queue, std::size_t max) = 0;
  virtual std::uint64_t purge(const std::string& queue) = 0;
  // Every queue when `queue` is empty.
  virtual std::vector<QueueStats> stats(const std::string& queue) = 0;

  virtual std::vector<Message> dead_letters(const std::string& queue, std::size_t max) = 0;
  // Each dead letter, oldest first, one at a time (memory: one message), until
  // `each` returns false.
  virtual void each_dead_letter(const std::string& queue,
                                const std::function<bool(const Message&)>& each) = 0;
  virtual std::uint64_t purge_dead_letters(const std::string& queue) = 0;
  // Returns the dead letters moved back (or that would move, with dry_run).
  virtual std::vector<Message> redrive(const std::string& queue,
                                       const RedriveOptions& options) = 0;

  // One dead letter by id; nullopt when there is none.
  virtual std::optional<Message> find_dead_letter(const std::string& queue,
                                                  const std::string& id) = 0;
  // Discards the dead letters named; returns the ids that were not found.
  virtual std::vector<std::string> delete_dead_letters(const std::string& queue,
                                                       const std::vector<std::string>& ids) = 0;

  // Every message of the queue, live then dead, with its state, oldest first.
  virtual void export_messages(const std::string& queue,
                               const std::function<void(const Message&)>& each) = 0;
  // Stores exported messages (their id when it is free in this file, else a
  // new one), in one transaction; returns the ids they have here. In-flight
  // messages arrive visible (a lease does not move between files).
  virtual std::vector<std::string> import_messages(const std::string& queue,
                                                   std::vector<Message> messages,
                                                   bool create_queue) = 0;

  // A consistent, compacted copy of the whole file, made while others use it.
  virtual void backup(const std::string& path) = 0;
  // Checks every record and index entry and the counters; returns what is wrong.
  virtual std::vector<std::string> verify() = 0;
};

// Queue names: 1 to 80 of letters, digits, '-', '_' and '.'.
bool is_valid_queue_name(const std::string& name);
// A queue being created must also not be "." or ".." (they read as paths) nor
// start with '-' (it reads as an option: `for q in $(q list)` breaks). Queues
// of older files with such names stay usable; only new ones are refused.
// Throws Error(Usage) saying why.
void check_new_queue_name(const std::string& name);

// Attributes a message may carry: at most kMaxAttributes, keys 1 to
// kMaxAttributeKey bytes, keys and values valid UTF-8 (they are text in JSON
// and in `q work`'s environment), each key once. Throws Error(InvalidData)
// naming the queue and the attribute.
void check_attributes(const std::string& queue, const Attributes& attributes);

// Attributes with each key once, the last value given winning, in the order
// the keys first appeared: how `send --attr`, `import` and old files with a
// repeated key are read.
Attributes last_value_wins(Attributes attributes);

// "1 message", "2 messages": a count with its noun.
std::string plural(std::uint64_t n, const std::string& noun);

// Full jitter: uniform in [0, min(cap, base * 2^(receive_count-1))], from a
// uniform random `unit` in [0, 1).
Millis backoff_delay(Millis base, Millis cap, std::uint32_t receive_count, double unit);

}  // namespace q
