// Internal to libq/nats: the Broker on JetStream, its state and its parts,
// shared by broker.cpp (queues, settings, streams and consumers),
// deliveries.cpp (send, receive, the lease records, q work) and inspect.cpp
// (stats, peek, dead letters, show, backup, verify).
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <unistd.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/nats/broker.hpp"
#include "libq/nats/backup.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/counters.hpp"
#include "libq/nats/dead.hpp"
#include "libq/nats/delay.hpp"
#include "libq/nats/groups.hpp"
#include "libq/nats/history.hpp"
#include "libq/nats/holders.hpp"
#include "libq/nats/leases.hpp"
#include "libq/nats/rate.hpp"
#include "libq/nats/records.hpp"
#include "libq/nats/send.hpp"
#include "libq/nats/stage.hpp"
#include "libq/nats/transfer.hpp"
#include "libq/nats/verify.hpp"
#include "libq/nats/watch.hpp"
#include "libq/ids.hpp"
#include "libq/rules.hpp"
#include "libq/sha256.hpp"
#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"

namespace q::nats {

using json = nlohmann::json;

inline constexpr const char* kConsumer = "q";
inline constexpr std::int64_t kMaxAckPending = std::int64_t{1} << 30;

[[noreturn]] void no_such_queue(const std::string& queue);

class NatsBroker final : public Broker {
 public:
  NatsBroker(const nats::Location& location, const NatsCredentials& credentials, Millis timeout,
             const Clock* clock, std::string location_text)
      : location_text_(std::move(location_text)),
        client_(location, credentials, timeout),
        names_{location.ns},
        clock_(clock ? clock : &system_clock_) {
    replicas_ = std::min(3, client_.cluster_size());
    leases_.use_groups(&groups_);
    leases_.use_counters(&counters_);
    leases_.use_workers(&workers_);
    dead_.use_counters(&counters_);
    client_.open_bucket("q_" + location.ns, replicas_);
  }

  // ---- queues ---------------------------------------------------------------

  bool do_create_queue(const std::string& queue, const ConfigChange& change) override;

  QueueConfig do_configure(const std::string& queue, const ConfigChange& change) override;

  RemovedCounts do_delete_queue(const std::string& queue) override;

  std::vector<std::string> do_list_queues() override;

  // ---- send -------------------------------------------------------------------

  std::vector<SendResult> do_send(const std::string& queue, std::vector<OutgoingMessage> messages,
                                  const SendOptions& options) override;

  // ---- receive and the lease records ------------------------------------------

  std::vector<Message> do_receive(const std::string& queue, const ReceiveOptions& options) override;

  std::vector<ReceiptResult> do_ack(const std::string& queue,
                                    const std::vector<std::string>& receipts) override;

  Millis do_extend(const std::string& queue, const std::string& receipt, Millis by) override;

  NackResult do_nack(const std::string& queue, const std::string& receipt,
                     const NackOptions& options) override;

  // ---- stats ------------------------------------------------------------------

  std::vector<QueueStats> do_stats(const std::string& queue) override;
  std::optional<QueueConfig> do_queue_config(const std::string& queue) override;

  std::uint64_t do_purge(const std::string& queue) override;

  // ---- peek --------------------------------------------------------------------

  // The oldest messages, sequence by sequence from the stream's first (2.9's
  // stream API reads one message by sequence; acked ones are gaps passed
  // over), each with its state from its lease.
  std::vector<Message> do_peek(const std::string& queue, std::size_t max) override;

  // ---- dead letters ------------------------------------------------------------

  void do_dead_letter(const std::string& queue, const std::string& receipt,
                      const std::string& reason, const RunReport& run) override;

  std::vector<Message> do_dead_letters(const std::string& queue, std::size_t max) override;

  void do_each_dead_letter(const std::string& queue,
                           const std::function<bool(const Message&)>& each) override;

  std::uint64_t do_purge_dead_letters(const std::string& queue) override;

  std::optional<Message> do_find_dead_letter(const std::string& queue,
                                             const std::string& id) override;

  std::vector<std::string> do_delete_dead_letters(const std::string& queue,
                                                  const std::vector<std::string>& ids) override;

  // Each dead letter moves on its own (JetStream has no transaction over two
  // streams): published to the target first, then removed here, so a move cut
  // short leaves it in both places at worst, and a repeat stores it once.
  std::vector<Message> do_redrive(const std::string& queue, const RedriveOptions& options) override;

  // ---- q work ------------------------------------------------------------------

  // Now when a message is visible; else a time to look again; INT64_MAX when
  // the queue is empty. q work asks this every turn of its loop, so it is
  // lookups only (the stream's state, the consumer's): listing the leases is
  // O(in flight), and a slow listing ended a q work (issue 25). A message
  // never delivered (the consumer's num_pending) is ready now. Leased and
  // delayed ones come back when their lease runs out, and JetStream's timer
  // is set to that (the lease rules): a no_wait receive finds them then, so
  // while any are in the stream this says "now" once every kLookAgain (the
  // watch wakes q work at once on a send, an ack, a nack).
  Millis do_next_delivery(const std::string& queue, bool rate_limited) override;
  std::map<std::string, Millis> look_again_;   // do_next_delivery's beat, per queue
  std::map<std::string, Millis> released_at_;  // when a message this process nacked is due

  // Messages the queue's consumer has not delivered yet.
  std::uint64_t consumer_num_pending(const std::string& queue);
  // A core NATS subscription to the namespace's publishes and lease
  // records (nats/watch.hpp): a waiting q work is woken by a send.
  std::unique_ptr<ChangeWatch> do_watch() override;

  // Idempotency keys: a record done.<Q>.<sha256 of key> = {until}. Written
  // before the ack (no transaction spans both): a crash between leaves the
  // message to be delivered again and skipped as done, never run twice. As
  // on a file, a stale receipt still records the key (the work was done).
  ReceiptOutcome do_ack_done(const std::string& queue, const std::string& receipt,
                             const std::string& key, Millis keep) override;

  bool do_is_done(const std::string& queue, const std::string& key) override;

  static std::string done_key(const std::string& queue, const std::string& key);

  // The registry names a q work's command in the attempt history
  // (nats/history.hpp): a record worker.<pid>.<since> while it runs.
  void do_register_worker(std::uint32_t pid, Millis since, const std::string& command) override;
  void do_unregister_worker(std::uint32_t pid, Millis since) override { workers_.drop(pid, since); }

  // A helper process answers for the holder on the cluster (nats/holders.hpp).
  void do_announce_holder(const Holder& holder, bool descendants) override;

  // q work --to: the outputs first, with ids named after the source delivery,
  // then the ack (nats/stage.hpp says why this is exact without a
  // transaction). A receipt already stale sends nothing; one that goes stale
  // between the publish and the ack leaves the outputs sent (the source's
  // next run publishes them again under the same ids: stored once).
  AckSendResult do_ack_and_send(const std::string& queue, const std::string& receipt,
                                const std::string& to, std::vector<OutgoingMessage> messages,
                                const SendOptions& options) override;

  // Export and import: nats/transfer.hpp.
  void do_export_messages(const std::string& queue,
                          const std::function<void(const Message&)>& each) override;
  std::vector<std::string> do_import_messages(const std::string& queue,
                                              std::vector<Message> messages, bool create_queue,
                                              bool skip_existing) override;
  // A pause lives in the queue's settings record (one CAS), where every
  // receive already looks.
  void do_pause(const std::string& queue, Millis until, const std::string& reason) override;

  std::optional<Pause> do_resume(const std::string& queue) override;
  // One message by id with its attempt history: live (the stream's message
  // at the id's sequence, its state and history from its lease), else a dead
  // letter (history in its Q-History header). A redriven message keeps its
  // id but has a new sequence: found by walking the stream for its Q-Id.
  std::optional<Message> do_show(const std::string& queue, const std::string& id) override;

  // A live message's state, receive count, times and attempts from its lease.
  // Acked (or moving to the dead letters): reported Dead for the caller to drop.
  Message live_state(const std::string& queue, std::uint64_t seq, Message m);
  // A queue file holding every queue of the namespace (nats/backup.hpp).
  void do_backup(const std::string& path) override;
  // The cluster's max_payload (from the server's INFO) less what q adds to a
  // body (nats/send.hpp): a max size that fits is sent, received and
  // dead-lettered whole; a larger one is refused when it is set.
  Capabilities do_capabilities() override;
  std::vector<std::string> do_verify() override;

 private:
  std::string location_text_;  // as opened (a holder's helper opens it again)
  Client client_;
  Names names_;
  SystemClock system_clock_;
  const Clock* clock_;
  int replicas_ = 1;
  nats::DeadLetters dead_{client_, names_, *clock_, replicas_};
  nats::LeaseBook leases_{client_, *clock_, dead_};
  nats::HolderBook holders_{client_, *clock_, leases_};
  std::string own_holder_;  // this process's token, once announced (q work)
  nats::Groups groups_{client_, names_};
  nats::RateBudget rate_{client_, *clock_};
  // Set only inside do_ack_and_send: the Nats-Msg-Id prefix of a stage's
  // outputs (nats/stage.hpp), for the do_send it calls.
  std::string stage_ids_;
  nats::Counters counters_{client_, names_, replicas_};
  nats::Workers workers_{client_};
  nats::Transfer transfer_{client_, names_, *clock_, dead_};

  std::optional<StoredQueue> load(const std::string& queue);
  // The pause in force now, if any (one that has ended is as good as none).
  std::optional<Pause> active_pause(const StoredQueue& have) const;
  [[noreturn]] static void busy_settings(const std::string& queue, const char* what);
  StoredQueue must_load(const std::string& queue);

  // ---- streams and consumers ----------------------------------------------------

  static Millis consumer_ack_wait(const QueueConfig& c);

  void ensure_stream(const std::string& queue, const QueueConfig& c, bool create);

  void ensure_consumer(const std::string& queue, const QueueConfig& c, bool create);

  // The max_ack_pending the queue's consumer has; 0 when it cannot be read.
  std::int64_t consumer_max_ack_pending(const std::string& queue);

  // Message `seq` of the queue's stream; nullptr when it is not there.
  nats::MsgPtr stored(const std::string& queue, std::uint64_t seq);

  jsStreamState stream_state(const std::string& queue);

  // One pull request to the queue's consumer, by hand rather than through
  // natsSubscription_Fetch: `no_wait` answers at once when nothing is there,
  // and with `expires` the consumer's leader holds the request until a
  // message arrives (a send wakes it at once) or the wait is over; either way
  // it ends the request as soon as it delivered what it had (2.9 semantics).
  // `held` (when given) says whether the consumer's leader kept the request
  // without an answer, as it does with a no_wait request at the consumer's
  // max_ack_pending.
  std::vector<MsgPtr> pull(const std::string& queue, int batch, Millis wait, bool* held = nullptr);

  // `next`, when given, gets the earliest time a leased or delayed message is
  // visible again.
  QueueStats stats_of(const std::string& queue, const StoredQueue& have, Millis* next = nullptr);
};

}  // namespace q::nats
