// The outcome policy of `q work`: what the end of a command means for its
// message (ack, dead-letter at once, release with backoff, release at a
// stop), what counts as failed, and recording it with the queue. Time comes
// from a q::Clock, so the policy has unit tests (tests/test_worker_policy.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace cli::work {

// How a command ended, as the runner saw it.
struct Ending {
  int status = 0;           // wait status
  bool timed_out = false;   // SIGTERMed by --timeout
  bool stopped = false;     // SIGTERMed by q work's own stop, after --grace
  int exec_errno = 0;       // the command could not be run at all
  std::string stderr_tail;  // the end of what it wrote to stderr
  std::string stderr_head;  // the start of it (its first line groups dead letters)
  // --to: what it wrote to stdout, unless that was over --to-max-bytes.
  std::string output;
  bool output_over_limit = false;
};

enum class Verdict {
  Ack,            // exit 0
  DeadLetter,     // exit 65: a bad message, never retried
  Retry,          // anything else: released with backoff; counts as failed
  ReleaseAtStop,  // stopped by q work: released at once, not a failure
};

struct Judgement {
  Verdict verdict = Verdict::Retry;
  std::string what;    // "exit status 3", "timed out after 5s", ...
  std::string reason;  // `what` and the command's last stderr lines: stored with the message
};

// `q work SRC --to DST`: where a successful run's stdout goes.
struct StageOptions {
  std::string to;                    // DST; empty: no stage (stdout is q work's)
  bool lines = false;                // one message per line, else the whole output as one
  std::uint64_t max_bytes = 0;       // the most stdout a run may write
  q::Attributes attributes;          // set on every output message, over the carried ones
  std::optional<std::string> group;  // FIFO group of the output; default: the source's
};

// The messages a run's output makes: none for empty output.
std::vector<q::OutgoingMessage> stage_messages(const q::Message& source, const std::string& output,
                                               const StageOptions& stage);

struct PolicyOptions {
  std::string queue;
  std::string program;  // the command's path, for "cannot run PROGRAM"
  q::Millis backoff_base = 1 * q::kSecond;
  q::Millis backoff_cap = 15 * q::kMinute;
  q::Millis grace = 30 * q::kSecond;
  std::optional<q::Millis> timeout;
  q::Millis idempotency_window = 0;  // how long a done key is remembered
  StageOptions stage;
};

Judgement judge(const Ending& ending, const PolicyOptions& options);

// For the attempt history (`q show`): the exit status (128+N for signal N) and
// the first line of stderr apart from its tail, so that dead letters group by
// how they failed (`q dlq list --by-reason`), not by each run's details.
q::RunReport run_report(const Ending& ending);

// What recording an outcome counted.
enum class Tally { Done, Failed, DeadLettered, Released, Skipped, None };

struct Settled {
  Tally tally = Tally::None;
  std::string note;  // for the user's stderr; empty: nothing to say
};

class OutcomePolicy {
 public:
  OutcomePolicy(q::Broker& broker, const q::Clock& clock, PolicyOptions options);

  const PolicyOptions& options() const { return o_; }

  // True when the outcome is a plain ack that may share a transaction with
  // others (exit 0 without an idempotency key to record).
  bool plain_ack(const Ending& ending, const std::string& key) const;

  // One round: acks plain successes and idempotent repeats (a note for each
  // receipt whose lease was lost before the ack) and receives per `take` (no
  // messages when take.max_messages is 0), in one transaction
  // (Broker::ack_and_receive). Throws q::Error(Busy) when the writer lock was
  // not granted (nothing acked, nothing taken).
  struct Round {
    std::vector<std::string> notes;
    std::vector<q::Message> taken;
  };
  Round ack_and_take(const std::vector<std::string>& receipts, const q::ReceiveOptions& take);

  // Records one ended command's outcome. Throws q::Error(Busy) (nothing
  // recorded) and the queue's own errors; a stale receipt is an outcome.
  Settled settle(const q::Message& message, const std::string& key, const Ending& ending);

  // True when the outcome passes a stage's output on (--to, exit 0).
  bool passes_on(const Ending& ending) const;

  // Every such outcome of a round at once: the acks and the outputs in one
  // transaction (Broker::ack_and_send_each), not one each. Returns one
  // Settled for each of the first k runs; the rest (k < runs.size(): the
  // writer lock was busy after k) are for the next turn. Throws
  // q::Error(Busy) when none was recorded.
  struct Run {
    const q::Message* message;
    const Ending* ending;
  };
  std::vector<Settled> pass_on_each(const std::vector<Run>& runs);

  // Extends a running command's lease by `by`: Done, or Stale/Malformed
  // with the detail (the heartbeat failed; the command runs on).
  q::ReceiptResult heartbeat(const std::string& receipt, q::Millis by);

 private:
  Settled pass_on(const q::Message& message, const Ending& ending);
  Settled passed_on(const q::Message& message, const Ending& ending,
                    const q::AckSendResult& result);
  Settled retry(const q::Message& message, const std::string& what, const std::string& reason,
                const q::RunReport& run);

  q::Broker& broker_;
  const q::Clock& clock_;
  PolicyOptions o_;
};

std::string lease_lost_note(const std::string& receipt);

}  // namespace cli::work
