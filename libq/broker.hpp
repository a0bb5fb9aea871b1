// The queue operations the CLI needs, independent of where messages are kept.
// LmdbBroker (lmdb/broker.hpp) is the one backend today; a backend on a
// distributed engine would implement the same interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libq/clock.hpp"

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

// The default max size of a queue's messages (body bytes), where the backend
// can hold it (Capabilities::max_size).
constexpr std::uint32_t kDefaultMaxSize = 1024 * 1024;

struct QueueConfig {
  Millis visibility_timeout = 30 * kSecond;
  std::uint32_t max_receives = 5;  // 0: never dead-letter
  Millis retention = 4 * kDay;
  Millis delay = 0;
  std::uint64_t max_depth = 0;               // 0: unlimited
  std::uint32_t max_size = kDefaultMaxSize;  // body bytes
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

QueueConfig apply(QueueConfig config, const ConfigChange& change);

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
  // Acks refused because their receipt was stale: the delivery had ended,
  // most often because its lease ran out and the message went to another
  // consumer (its work done twice), also by an ack repeated or made after a
  // nack.
  std::uint64_t stale_acks = 0;
};

// A paused queue delivers nothing (receive finds nothing) and accepts sends.
struct Pause {
  Millis since = 0;
  Millis until = 0;  // 0: until resumed
  std::string reason;
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
  std::optional<Pause> pause;  // while paused
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

// The last kMaxAttempts deliveries of a message are kept with it (`q show`).
constexpr std::size_t kMaxAttempts = 8;
constexpr std::size_t kMaxStderrTail = 1024;  // bytes of a command's stderr kept per attempt

// How a delivery ended. Open: still in flight (or its lease ran out and no
// receive has seen it since).
enum class AttemptEnd : std::uint8_t {
  Open = 0,
  Released = 1,       // nack (or q work: the command failed)
  TimedOut = 2,       // the lease ran out; the next receive noticed
  HeartbeatLost = 3,  // the lease of a q work delivery ran out: its heartbeat stopped
  DeadLettered = 4,   // dead-lettered at once (q work: exit 65)
};
const char* to_string(AttemptEnd end);

// What a consumer that ran a command reports about the run (q work).
struct RunReport {
  std::optional<int> exit_status;  // 128+N for death by signal N; none: did not exit normally
  std::string first_line;          // the first line of its stderr (grouping key)
  std::string stderr_tail;         // the last lines of its stderr
};

struct Attempt {
  std::uint32_t receive = 0;  // which delivery: the receive count it had
  Millis received_at = 0;
  std::uint32_t pid = 0;    // the receiving process
  Millis worker_since = 0;  // q work: when that q work started; 0: not q work
  std::string command;      // q work's command line, when its registry entry remains
  AttemptEnd end = AttemptEnd::Open;
  Millis ended_at = 0;
  std::string reason;  // the nack or dead-letter reason
  RunReport run;
};

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
  // Filled by Broker::show and each_dead_letter: the last deliveries, oldest first.
  std::vector<Attempt> attempts;
};

// A process named as the holder of the leases it takes (issue 14): once it is
// gone, its messages are released at once instead of at the end of their
// visibility timeout. Its start time tells a reused pid apart; see holder.hpp.
struct Holder {
  std::uint32_t pid = 0;
  std::uint64_t start_time = 0;     // /proc/PID/stat field 22: clock ticks after boot
  std::uint64_t pid_namespace = 0;  // inode of its /proc/PID/ns/pid; 0: unknown
};

// Released because its holder died: the reason a released message keeps.
constexpr const char* kHolderDied = "holder died";

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
  // The messages received are held by this process (none: held by nobody,
  // released only by their timeout, ack or nack).
  std::optional<Holder> holder;
  // Who receives, for the attempt history: 0 means this process. A q work
  // passes its start time too (its registry key with the pid).
  std::uint32_t holder_pid = 0;
  Millis worker_since = 0;
  // A file: the commit keeps the file intact but is made durable only by the
  // next Broker::sync() (or any later commit), which the caller makes as soon
  // as it has started work on what it received (q work: its commands start
  // while the sync runs). A power cut in between undoes the round: its
  // messages are delivered again, as after a crash.
  bool sync_later = false;
};

enum class ReceiptOutcome { Done, Stale, Malformed };

struct ReceiptResult {
  std::string receipt;
  ReceiptOutcome outcome = ReceiptOutcome::Done;
  std::string detail;  // why it was stale or malformed
};

struct AckSendResult {
  ReceiptOutcome outcome = ReceiptOutcome::Done;
  std::string detail;            // why the receipt was stale or malformed
  std::vector<SendResult> sent;  // empty unless the ack was done
  // ack_and_send_each only: DST refused this item's output (no such queue,
  // full, too large): nothing of it was acked or sent, and this says why.
  std::string refused;
};

// One step of a stage: the receipt of the message a run consumed and the
// messages its output makes.
struct StageStep {
  std::string receipt;
  std::vector<OutgoingMessage> messages;
};

// One round of a consumer (q work): the acks of what finished and the next
// messages, from one write transaction.
struct AckReceiveResult {
  std::vector<ReceiptResult> acked;  // one per receipt, in order
  std::vector<Message> received;
};

struct NackOptions {
  Millis delay = 0;
  bool backoff = false;
  Millis backoff_base = 1 * kSecond;
  Millis backoff_cap = 15 * kMinute;
  std::string reason;
  RunReport run;  // q work: the command's exit status and stderr, for the attempt history
  // A failed run at the last receive the queue allows (max_receives) goes to
  // the dead letters in the same transaction instead of being released, so it
  // is never delivered again and its consumer knows it was dead-lettered.
  bool dead_letter_when_spent = false;
};

struct NackResult {
  Millis visible_at = 0;       // when it is visible again; 0 when dead-lettered
  bool dead_lettered = false;  // dead_letter_when_spent and its receives were used up
};

struct RedriveOptions {
  std::vector<std::string> ids;      // empty: all, oldest first
  std::optional<std::uint64_t> max;  // at most this many
  bool dry_run = false;
  std::string to;  // another queue to move them to; empty: their own
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

// What a backend can store, for the rules above it (Broker::create_queue,
// configure).
struct Capabilities {
  // The largest max_size a queue may have here: a body of that size, with
  // attributes at their limits, can be sent, received and dead-lettered.
  std::uint32_t max_size = kMaxMaxSize;
  // Where that limit comes from and how to raise it, for the refusal of a
  // larger max_size (empty: kMaxMaxSize, q's own limit).
  std::string max_size_source;
  // A send or an ack of many that fails stored none of them (one
  // transaction). False where a failure part-way can leave some stored (NATS
  // publishes one message at a time), so a caller must not try them again.
  bool all_or_nothing = false;
};

class Broker {
 public:
  virtual ~Broker() = default;

  Capabilities capabilities() { return do_capabilities(); }
  // The settings of a queue made without any: QueueConfig's, with the
  // max size lowered to what the backend can hold.
  QueueConfig default_config();

  // Creates the queue; an existing queue is fine when `change` agrees with it.
  // Returns true when the queue was created.
  bool create_queue(const std::string& queue, const ConfigChange& change);
  QueueConfig configure(const std::string& queue, const ConfigChange& change);
  RemovedCounts delete_queue(const std::string& queue);
  std::vector<std::string> list_queues();
  std::vector<SendResult> send(const std::string& queue, std::vector<OutgoingMessage> messages,
                               const SendOptions& options);
  // Empty when nothing became visible within options.wait.
  std::vector<Message> receive(const std::string& queue, const ReceiveOptions& options);
  std::vector<ReceiptResult> ack(const std::string& queue,
                                 const std::vector<std::string>& receipts);
  // Throw Error(Stale) or Error(InvalidData) for a stale or malformed receipt.
  // extend returns the new visible-until time.
  Millis extend(const std::string& queue, const std::string& receipt, Millis by);
  Millis nack(const std::string& queue, const std::string& receipt, const NackOptions& options);
  // nack, saying whether the message went to the dead letters instead
  // (NackOptions::dead_letter_when_spent).
  NackResult nack_or_dead_letter(const std::string& queue, const std::string& receipt,
                                 const NackOptions& options);
  // Moves the delivered message to the dead-letter queue at once.
  void dead_letter(const std::string& queue, const std::string& receipt, const std::string& reason,
                   const RunReport& run = {});
  // One stage of a pipeline: acks the delivered message of `queue` and sends
  // `messages` to the queue `to`, in one transaction. A stale or malformed
  // receipt sends nothing (the outcome says which); a refused send (no such
  // queue, full, too large) throws and acks nothing. `to` must not be `queue`.
  AckSendResult ack_and_send(const std::string& queue, const std::string& receipt,
                             const std::string& to, std::vector<OutgoingMessage> messages,
                             const SendOptions& options);
  // Many stage steps at once (a q work --to round): each step as
  // ack_and_send does it, in one transaction where the backend has one, so a
  // round of N successes pays one commit, not N. A step whose output DST
  // refuses is reported in its result's `refused` (nothing of it done), and
  // the other steps go on. Returns a result for each step in order, or for
  // the first k of them when the writer lock or the store failed after k
  // were done (the rest: not tried; nothing of them done); it throws only
  // when none was done.
  std::vector<AckSendResult> ack_and_send_each(const std::string& queue, const std::string& to,
                                               std::vector<StageStep> steps,
                                               const SendOptions& options);
  // Makes durable a commit made with ReceiveOptions::sync_later.
  void sync() { do_sync(); }
  // One round of a consumer: acks `receipts` (as ack does, a stale or
  // malformed receipt is an outcome) and receives up to
  // options.max_messages (0: none) in one write transaction, so a runner pays
  // one commit per round instead of one per ack and one per receive. It never
  // waits (options.wait must be 0): the acks are not held back.
  AckReceiveResult ack_and_receive(const std::string& queue,
                                   const std::vector<std::string>& receipts,
                                   const ReceiveOptions& options);
  // Idempotency records of consumers: ack_done acks and records `key` as done
  // until now + keep, in one transaction; is_done tells whether it is.
  ReceiptOutcome ack_done(const std::string& queue, const std::string& receipt,
                          const std::string& key, Millis keep);
  bool is_done(const std::string& queue, const std::string& key);
  // When a receive could next get a message: now or earlier when one is
  // visible (and, with rate_limited, the rate budget allows); INT64_MAX: not
  // before something changes.
  Millis next_delivery(const std::string& queue, bool rate_limited);
  std::unique_ptr<ChangeWatch> watch();
  // Stops deliveries until `until` (0: until resume); a pause again replaces
  // the one in place. resume returns the pause it ended, if one was in force.
  void pause(const std::string& queue, Millis until, const std::string& reason);
  std::optional<Pause> resume(const std::string& queue);
  std::vector<Message> peek(const std::string& queue, std::size_t max);
  std::uint64_t purge(const std::string& queue);
  // Every queue when `queue` is empty.
  std::vector<QueueStats> stats(const std::string& queue);
  // The settings of `queue` alone (one record read, where stats counts
  // everything); nullopt when there is no such queue.
  std::optional<QueueConfig> queue_config(const std::string& queue);
  std::vector<Message> dead_letters(const std::string& queue, std::size_t max);
  // Each dead letter, oldest first, one at a time (memory: one message), until
  // `each` returns false.
  void each_dead_letter(const std::string& queue, const std::function<bool(const Message&)>& each);
  std::uint64_t purge_dead_letters(const std::string& queue);
  // Returns the dead letters moved back (or that would move, with dry_run).
  std::vector<Message> redrive(const std::string& queue, const RedriveOptions& options);
  // One dead letter by id; nullopt when there is none.
  std::optional<Message> find_dead_letter(const std::string& queue, const std::string& id);
  // Discards the dead letters named; returns the ids that were not found.
  std::vector<std::string> delete_dead_letters(const std::string& queue,
                                               const std::vector<std::string>& ids);
  // One message, live or dead, with its attempt history; nullopt when there is none.
  std::optional<Message> show(const std::string& queue, const std::string& id);
  // q work's registry: its command line, stored once per process (keyed by
  // pid and start time) rather than with every delivery. Registering also
  // drops entries of processes that no longer run.
  void register_worker(std::uint32_t pid, Millis since, const std::string& command);
  void unregister_worker(std::uint32_t pid, Millis since);
  // Makes `holder` (this process, or the pid of receive --holder) known as a
  // holder where the backend needs it: on a file nothing (any q process sees
  // the pid); on NATS a helper process answers for it on the cluster while
  // it lives, and with `descendants` (q work) while any process it starts
  // lives (nats/holders.hpp). Receives with ReceiveOptions::holder follow.
  void announce_holder(const Holder& holder, bool descendants) {
    do_announce_holder(holder, descendants);
  }
  // Every message of the queue, live then dead, with its state, oldest first.
  void export_messages(const std::string& queue, const std::function<void(const Message&)>& each);
  // Stores exported messages (their id when it is free in this file, else a
  // new one), in one transaction; returns the ids they have here. In-flight
  // messages arrive visible (a lease does not move between files).
  // With skip_existing, a message whose id is already a live or dead message
  // of this queue is left out (a repeated import adds nothing); the ids
  // returned are those of the messages stored.
  std::vector<std::string> import_messages(const std::string& queue, std::vector<Message> messages,
                                           bool create_queue, bool skip_existing = false);
  // A consistent, compacted copy of the whole file, made while others use it.
  void backup(const std::string& path);
  // Checks every record and index entry and the counters; returns what is wrong.
  std::vector<std::string> verify();

 protected:
  // ---- what a backend implements ------------------------------------------------
  // The public method of the same name says what each does; here is what a
  // backend must guarantee. Checked above, in the public methods (rules.hpp),
  // so a backend never sees them wrong: queue names, ranges of every number
  // and duration, body and attribute sizes and syntax, receipt syntax for
  // extend/nack/dead_letter/ack_done, what a queue kind refuses (a group on a
  // standard queue...). Everything else is the backend's: existence of the
  // queue (Error(NotFound) with Remedy::CreateQueue), its limits (max depth:
  // Error(Full); a size over the queue's max_size: Error(InvalidData)),
  // fencing of receipts, atomicity, and the counters of stats.
  //
  // Rules every mutating do_* keeps (tests/conformance runs them against every
  // backend):
  //  - Atomic: the whole change or none of it, also when the process is killed
  //    at any instruction (LMDB: one write transaction; NATS: the record that
  //    makes a change count is written last, by compare-and-set, and a change
  //    cut short is finished or undone by the next operation that meets it).
  //  - Fenced: a receipt names one delivery. Once that delivery's lease ran out
  //    and the message was delivered again, or was acked, nacked or
  //    dead-lettered, the receipt is stale: ack/ack_and_send/ack_done/
  //    ack_and_receive give ReceiptOutcome::Stale, extend/nack/dead_letter
  //    throw Error(Stale). A malformed or unknown receipt is
  //    ReceiptOutcome::Malformed or Error(InvalidData). A lapsed lease nobody
  //    took since still acks (the message is not lost twice over), except
  //    behind its group's head on a FIFO queue (ORDERING in q(7)).
  //  - Counted: every message sent counts once as sent, every ack once as
  //    acked, every move to the dead letters once as dead-lettered, with the
  //    reason kept; stats' depth, in-flight, delayed and dead are exact.
  //  - FIFO: one delivery of a group at a time, in send order; dedup ids and
  //    content dedup within the queue's dedup window.
  //  - max_receives: the receive that would exceed it moves the message to the
  //    dead letters with the reason of its last failure ("not acknowledged
  //    after N receives" when none was given), in the same change.
  //
  // A backend creating a queue (also for send --create and import --create)
  // starts from default_config(); do_capabilities lowers what it cannot hold.
  virtual Capabilities do_capabilities() { return {}; }
  // Returns false when the queue exists and agrees with `change`; a queue that
  // exists with other settings: Error(Usage) naming the first that differs.
  virtual bool do_create_queue(const std::string& queue, const ConfigChange& change) = 0;
  // Changes only what `change` names; a kind (fifo, content_dedup) is fixed.
  virtual QueueConfig do_configure(const std::string& queue, const ConfigChange& change) = 0;
  // The queue, its messages, dead letters, leases, groups, dedup and done
  // records: all gone, or none (a later create starts empty).
  virtual RemovedCounts do_delete_queue(const std::string& queue) = 0;
  virtual std::vector<std::string> do_list_queues() = 0;  // sorted
  // All of `messages` or none (Error(Full) when the depth would pass
  // max_depth); a dedup id seen within the window returns the first message's
  // id with duplicate = true and stores nothing.
  virtual std::vector<SendResult> do_send(const std::string& queue,
                                          std::vector<OutgoingMessage> messages,
                                          const SendOptions& options) = 0;
  // Each message returned is leased until now + visibility (its receive count
  // raised, its attempt recorded) before it is returned; waits up to
  // options.wait for one to become visible (do_watch's wake-ups, no busy loop).
  virtual std::vector<Message> do_receive(const std::string& queue,
                                          const ReceiveOptions& options) = 0;
  // One outcome per receipt, in order; a stale one changes nothing.
  virtual std::vector<ReceiptResult> do_ack(const std::string& queue,
                                            const std::vector<std::string>& receipts) = 0;
  virtual Millis do_extend(const std::string& queue, const std::string& receipt, Millis by) = 0;
  virtual NackResult do_nack(const std::string& queue, const std::string& receipt,
                             const NackOptions& options) = 0;
  virtual void do_dead_letter(const std::string& queue, const std::string& receipt,
                              const std::string& reason, const RunReport& run) = 0;
  // Exactly once in effect: the outputs are stored once even when a stage is
  // killed between its sends and its ack and runs again (NATS: ids named
  // after the source delivery).
  virtual AckSendResult do_ack_and_send(const std::string& queue, const std::string& receipt,
                                        const std::string& to,
                                        std::vector<OutgoingMessage> messages,
                                        const SendOptions& options) = 0;
  // The default: do_ack_and_send step by step (each its own change). A
  // backend with transactions does them in one and falls back to this when
  // a step is refused, so that the refused one alone is left undone.
  virtual std::vector<AckSendResult> do_ack_and_send_each(const std::string& queue,
                                                          const std::string& to,
                                                          std::vector<StageStep> steps,
                                                          const SendOptions& options);
  virtual void do_sync() {}  // a backend whose every change is durable at once
  // Backends without a combined transaction may keep this default: do_ack,
  // then do_receive (two transactions; the outcome is the same).
  virtual AckReceiveResult do_ack_and_receive(const std::string& queue,
                                              const std::vector<std::string>& receipts,
                                              const ReceiveOptions& options);
  virtual ReceiptOutcome do_ack_done(const std::string& queue, const std::string& receipt,
                                     const std::string& key, Millis keep) = 0;
  virtual bool do_is_done(const std::string& queue, const std::string& key) = 0;
  virtual Millis do_next_delivery(const std::string& queue, bool rate_limited) = 0;
  // Wakes (fd readable) after any change another process commits.
  virtual std::unique_ptr<ChangeWatch> do_watch() = 0;
  // Reads change nothing: no receive count, no lease, no counter.
  virtual std::vector<Message> do_peek(const std::string& queue, std::size_t max) = 0;
  virtual std::uint64_t do_purge(const std::string& queue) = 0;
  virtual std::vector<QueueStats> do_stats(const std::string& queue) = 0;
  // The one settings record (nullopt: no such queue).
  virtual std::optional<QueueConfig> do_queue_config(const std::string& queue) = 0;
  virtual std::vector<Message> do_dead_letters(const std::string& queue, std::size_t max) = 0;
  virtual void do_each_dead_letter(const std::string& queue,
                                   const std::function<bool(const Message&)>& each) = 0;
  virtual std::uint64_t do_purge_dead_letters(const std::string& queue) = 0;
  // A redriven message keeps its id and history, its receive count starts again.
  virtual std::vector<Message> do_redrive(const std::string& queue,
                                          const RedriveOptions& options) = 0;
  virtual std::optional<Message> do_find_dead_letter(const std::string& queue,
                                                     const std::string& id) = 0;
  virtual std::vector<std::string> do_delete_dead_letters(const std::string& queue,
                                                          const std::vector<std::string>& ids) = 0;
  virtual void do_export_messages(const std::string& queue,
                                  const std::function<void(const Message&)>& each) = 0;
  // Counts each imported message as sent, an imported dead letter as sent
  // and dead-lettered (q-import(1)).
  virtual std::vector<std::string> do_import_messages(const std::string& queue,
                                                      std::vector<Message> messages,
                                                      bool create_queue, bool skip_existing) = 0;
  virtual void do_pause(const std::string& queue, Millis until, const std::string& reason) = 0;
  virtual std::optional<Pause> do_resume(const std::string& queue) = 0;
  virtual std::optional<Message> do_show(const std::string& queue, const std::string& id) = 0;
  virtual void do_register_worker(std::uint32_t pid, Millis since, const std::string& command) = 0;
  virtual void do_unregister_worker(std::uint32_t pid, Millis since) = 0;
  // A lease whose holder died is released (visible again) without waiting for
  // its timeout; on a file any q sees the pid, so the default does nothing.
  virtual void do_announce_holder(const Holder&, bool) {}
  virtual void do_backup(const std::string& path) = 0;
  virtual std::vector<std::string> do_verify() = 0;
};

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
