// NatsBroker: q's queues on JetStream. One work-queue stream and one durable
// pull consumer per queue hold and deliver the messages; q's own records (the
// queue's settings and one lease per delivered message) live in one KV-shaped
// bucket per namespace and are changed only by compare-and-set. JetStream has
// no fencing of acks, so every ack, extend and nack first wins a CAS on the
// message's lease record; a receipt whose lease was replaced is stale.
// ARCHITECTURE.md, "Distributed backend (NATS JetStream)", has the whole design.
#include "nats_broker.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nats_client.hpp"
#include "nats_delay.hpp"
#include "nats_done.hpp"
#include "nats_groups.hpp"
#include "nats_leases.hpp"
#include "nats_rate.hpp"
#include "nats_records.hpp"
#include "nats_send.hpp"
#include "nats_watch.hpp"
#include "sha256.hpp"
#include "records.hpp"
#include "rules.hpp"
#include "timefmt.hpp"

namespace q {
namespace {

using nats::Client;
using nats::kNs;
using nats::Lease;
using nats::MsgPtr;
using nats::Names;
using nats::Record;
using nats::StoredQueue;
using json = nlohmann::json;

constexpr const char* kConsumer = "q";
constexpr jsErrCode kStreamNotFound = static_cast<jsErrCode>(10059);

[[noreturn]] void not_yet(const char* what) {
  throw Error(ErrorKind::Usage,
              fmt::format("{}: not available on nats:// locations yet (issue 16; see "
                          "ARCHITECTURE.md, Distributed backend)",
                          what));
}

[[noreturn]] void no_such_queue(const std::string& queue) {
  throw Error(ErrorKind::NotFound,
              fmt::format("queue {}: no such queue (create it with 'q create {}')", queue, queue));
}

class NatsBroker final : public Broker {
 public:
  NatsBroker(const nats::Location& location, Millis timeout, const Clock* clock)
      : client_(location, timeout), names_{location.ns}, clock_(clock ? clock : &system_clock_) {
    replicas_ = std::min(3, client_.cluster_size());
    leases_.use_groups(&groups_);
    client_.open_bucket("q_" + location.ns, replicas_);
  }

  // ---- queues ---------------------------------------------------------------

  bool do_create_queue(const std::string& queue, const ConfigChange& change) override {
    QueueConfig config = apply(QueueConfig{}, change);
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (auto have = load(queue)) {
        check_agrees(queue, have->config, change);
        return false;
      }
      check_new_queue_name(queue);
      // The streams first, the settings record last: the record is what makes
      // the queue exist, so a create cut short leaves nothing a command sees.
      ensure_stream(queue, config, true);
      ensure_consumer(queue, config, true);
      if (client_.put_if(Names::config_key(queue), nats::encode_config(config, clock_->now()), 0))
        return true;
    }
    throw Error(ErrorKind::Busy, fmt::format("queue {}: created and deleted by others while "
                                             "this create ran; try again",
                                             queue));
  }

  QueueConfig do_configure(const std::string& queue, const ConfigChange& change) override {
    for (int attempt = 0; attempt < 5; ++attempt) {
      StoredQueue have = must_load(queue);
      check_kind_kept(queue, have.config, change);
      QueueConfig config = apply(have.config, change);
      validate(config);
      ensure_stream(queue, config, false);
      ensure_consumer(queue, config, false);
      if (client_.put_if(Names::config_key(queue), nats::encode_config(config, have.created_at),
                         have.revision))
        return config;
    }
    throw Error(
        ErrorKind::Busy,
        fmt::format("queue {}: its settings kept changing under this config; try again", queue));
  }

  RemovedCounts do_delete_queue(const std::string& queue) override {
    StoredQueue have = must_load(queue);
    RemovedCounts counts;
    counts.messages = stream_state(queue).Msgs;
    client_.remove(have.revision);
    jsErrCode code{};
    natsStatus s = client_.retry(
        "deleting queue " + queue,
        [&](jsErrCode* err) {
          return js_DeleteStream(client_.js(), names_.stream(queue).c_str(), nullptr, err);
        },
        &code);
    if (s != NATS_OK && code != kStreamNotFound) client_.fail("deleting queue " + queue, s, code);
    client_.purge(Names::lease_prefix(queue) + "*");
    client_.purge(nats::Groups::wait_prefix(queue) + "*");
    client_.purge(nats::DoneBook::prefix(queue) + "*");
    client_.purge(nats::RateBudget::key(queue));
    return counts;
  }

  std::vector<std::string> do_list_queues() override {
    std::vector<std::string> names;
    client_.each("config.*", [&](const std::string& key, const Record&) {
      if (auto name = nats::decode_name(key.substr(key.find('.') + 1))) names.push_back(*name);
    });
    std::sort(names.begin(), names.end());
    return names;
  }

  // ---- send -------------------------------------------------------------------

  std::vector<SendResult> do_send(const std::string& queue, std::vector<OutgoingMessage> messages,
                                  const SendOptions& options) override {
    auto have = load(queue);
    if (!have && options.create_queue) {
      check_new_queue_name(queue);
      do_create_queue(queue, {});
      have = load(queue);
    }
    if (!have) no_such_queue(queue);
    const QueueConfig& config = have->config;
    check_send_against(queue, config, messages, options);
    if (config.content_dedup)
      for (auto& m : messages)
        if (m.dedup_id.empty()) m.dedup_id = sha256_hex(m.body);
    Millis now = clock_->now();
    Millis visible_at = nats::send_visible_at(queue, config, options, now);
    std::size_t max_payload = static_cast<std::size_t>(natsConnection_GetMaxPayload(client_.nc()));
    std::size_t index = 0;
    for (const auto& m : messages) {
      ++index;
      // Headers (attributes, ids) travel in the same NATS message as the body.
      if (m.body.size() + 1024 + nats::Publisher::attributes_json(m.attributes).size() >
          max_payload)
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: message {} is {} bytes, over what the NATS servers "
                                "take in one message ({} bytes with q's headers; their "
                                "max_payload); nothing was sent",
                                queue, index, m.body.size(), max_payload));
    }
    if (config.max_depth != 0) {
      std::uint64_t depth = stream_state(queue).Msgs;
      if (depth + messages.size() > config.max_depth)
        throw Error(ErrorKind::Full,
                    fmt::format("queue {}: full ({} of max depth {} messages); {} more would not "
                                "fit, nothing was sent",
                                queue, depth, config.max_depth, messages.size()));
    }
    nats::Publisher publisher(client_, names_, *clock_);
    if (visible_at > now) publisher.visible_at(visible_at);
    auto results = publisher.publish(queue, config, messages);
    if (visible_at > now) {
      std::vector<std::uint64_t> seqs;
      for (const auto& r : results)
        if (!r.duplicate) seqs.push_back(*store::parse_message_id(r.id));
      nats::mark_delayed(client_, queue, seqs, visible_at);
    }
    return results;
  }

  // ---- receive and the lease records ------------------------------------------

  std::vector<Message> do_receive(const std::string& queue,
                                  const ReceiveOptions& options) override {
    StoredQueue have = must_load(queue);
    Millis vt = options.visibility_timeout.value_or(have.config.visibility_timeout);
    Millis ack_wait = consumer_ack_wait(have.config);
    std::vector<Message> got;
    auto start = std::chrono::steady_clock::now();
    auto left = [&] {
      return options.wait - std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
    };
    // The queue's shared rate (nats_rate.hpp): starts are taken before the
    // pull, and those not used given back after it.
    std::uint64_t want = options.max_messages;
    const bool rated = options.rate_limited && have.config.rate > 0;
    if (rated) {
      while ((want = rate_.take(queue, have.config.rate, options.max_messages)) == 0) {
        Millis until = rate_.ready_at(queue, have.config.rate) - clock_->now();
        if (left() <= 0) return got;
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::clamp<Millis>(until, 1, left())));
      }
    }
    for (;;) {
      Millis wait = left();
      auto batch = pull(queue, static_cast<int>(want - got.size()), std::max<Millis>(wait, 0));
      for (auto& msg : batch)
        if (auto m = leases_.take(queue, msg.get(), vt, ack_wait)) got.push_back(std::move(*m));
      if (got.size() >= want) break;
      // Deliveries passed over (delayed, their group held): what is behind
      // them may be visible; pull again.
      if (!batch.empty()) continue;
      if (!got.empty() || wait <= 0) break;
    }
    if (rated) rate_.give_back(queue, have.config.rate, want - got.size());
    return got;
  }

  std::vector<ReceiptResult> do_ack(const std::string& queue,
                                    const std::vector<std::string>& receipts) override {
    must_load(queue);
    std::vector<ReceiptResult> results;
    std::map<std::string, std::size_t> first;
    for (const auto& receipt : receipts) {
      if (auto seen = first.find(receipt); seen != first.end()) {
        results.push_back(results[seen->second]);
        continue;
      }
      first.emplace(receipt, results.size());
      ReceiptResult result{receipt, ReceiptOutcome::Done, {}};
      try {
        auto [seq, lease, revision] = leases_.current(queue, receipt);
        Lease acked = lease;
        acked.state = Lease::Acked;
        auto rev = leases_.change(queue, receipt, seq, acked, revision);
        // Decided: the lease says acked, so no receive hands the message out
        // again (one that gets it finishes this ack). Now tell JetStream; if
        // the cluster does not answer, the ack stands all the same.
        try {
          client_.request(lease.reply, "+ACK");
          // The lease goes only once the stream dropped the message: a
          // delivery sent before the ack then finds `a`, or no message
          // (nats_leases.cpp, take), never a free message to lease again.
          groups_.settle_ack(queue, seq);
          // FIFO: the group's next message, passed over while this one was
          // its head, goes back to JetStream now (before the lease goes, so
          // a receive meanwhile still sees this message acked).
          if (!lease.group.empty()) groups_.wake_next(queue, lease.group, seq);
          client_.remove(rev);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Busy) throw;
        }
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Stale && e.kind() != ErrorKind::InvalidData) throw;
        result.outcome =
            e.kind() == ErrorKind::Stale ? ReceiptOutcome::Stale : ReceiptOutcome::Malformed;
        result.detail = e.what();
      }
      results.push_back(std::move(result));
    }
    return results;
  }

  Millis do_extend(const std::string& queue, const std::string& receipt, Millis by) override {
    must_load(queue);
    auto [seq, lease, revision] = leases_.current(queue, receipt);
    Millis now = clock_->now();
    Millis until = now + by;
    check_extend_limit(receipt, until, lease.received_at);
    Lease next = lease;
    next.until = until;
    leases_.change(queue, receipt, seq, next, revision);
    // `-NAK {"delay"}` on a pending message moves its redelivery to now+delay
    // and keeps it pending: JetStream's timer follows the lease.
    leases_.rearm(lease.reply, by);
    return until;
  }

  Millis do_nack(const std::string& queue, const std::string& receipt,
                 const NackOptions& options) override {
    must_load(queue);
    auto [seq, lease, revision] = leases_.current(queue, receipt);
    Millis delay = options.delay;
    if (options.backoff) {
      double unit = leases_.unit();
      delay = backoff_delay(options.backoff_base, options.backoff_cap, lease.receives, unit);
    }
    Millis now = clock_->now();
    Lease next = lease;
    next.state = Lease::Released;
    next.until = now + delay;
    if (!options.reason.empty()) next.reason = options.reason;
    leases_.change(queue, receipt, seq, next, revision);
    leases_.rearm(lease.reply, delay);
    return now + delay;
  }

  // ---- stats ------------------------------------------------------------------

  std::vector<QueueStats> do_stats(const std::string& queue) override {
    std::vector<QueueStats> out;
    if (!queue.empty()) {
      out.push_back(stats_of(queue, must_load(queue)));
      return out;
    }
    for (const auto& name : do_list_queues())
      if (auto have = load(name)) out.push_back(stats_of(name, *have));
    return out;
  }

  std::uint64_t do_purge(const std::string& queue) override {
    must_load(queue);
    std::uint64_t removed = stream_state(queue).Msgs;
    jsErrCode code{};
    natsStatus s = client_.retry(
        "purging queue " + queue,
        [&](jsErrCode* err) {
          return js_PurgeStream(client_.js(), names_.stream(queue).c_str(), nullptr, err);
        },
        &code);
    if (s != NATS_OK) client_.fail("purging queue " + queue, s, code);
    client_.purge(Names::lease_prefix(queue) + "*");
    client_.purge(nats::Groups::wait_prefix(queue) + "*");
    return removed;
  }

  // ---- not on this backend yet (issue 16) ---------------------------------------

  void do_dead_letter(const std::string&, const std::string&, const std::string&,
                      const RunReport&) override {
    not_yet("dead-lettering a delivery");
  }
  AckSendResult do_ack_and_send(const std::string&, const std::string&, const std::string&,
                                std::vector<OutgoingMessage>, const SendOptions&) override {
    not_yet("q work --to (ack and send)");
  }
  ReceiptOutcome do_ack_done(const std::string& queue, const std::string& receipt,
                             const std::string& key, Millis keep) override {
    must_load(queue);
    // The key first: a crash between the two leaves the work recorded done
    // (its redelivery is skipped), as a stale receipt does on a file.
    done_.record(queue, key, clock_->now() + keep);
    auto result = do_ack(queue, {receipt}).at(0);
    if (result.outcome == ReceiptOutcome::Malformed)
      throw Error(ErrorKind::InvalidData, result.detail);
    return result.outcome;
  }
  bool do_is_done(const std::string& queue, const std::string& key) override {
    must_load(queue);
    return done_.is_done(queue, key, clock_->now());
  }
  Millis do_next_delivery(const std::string& queue, bool rate_limited) override {
    StoredQueue have = must_load(queue);
    jsStreamState state = stream_state(queue);
    if (state.Msgs == 0) return INT64_MAX;
    Millis now = clock_->now();
    std::uint64_t held = 0;
    Millis earliest = INT64_MAX;
    client_.each(Names::lease_prefix(queue) + "*", [&](const std::string& key, const Record& r) {
      std::uint64_t seq = std::stoull(key.substr(key.rfind('.') + 1));
      if (seq < state.FirstSeq) return;
      Lease l = Lease::decode(r.value);
      if (l.state == Lease::Acked || l.until > now) {
        ++held;
        if (l.state != Lease::Acked) earliest = std::min(earliest, l.until);
      }
    });
    // A FIFO queue delivers group heads: a group is free when no lease in the
    // future holds it (a delayed message behind its head counts too: that
    // answers later than could be, never earlier).
    std::uint64_t ready =
        have.config.fifo ? static_cast<std::uint64_t>(state.NumSubjects) : state.Msgs;
    Millis next = ready > held ? INT64_MIN : earliest;
    if (rate_limited && have.config.rate > 0 && next != INT64_MAX)
      next = std::max(next, rate_.ready_at(queue, have.config.rate));
    return next;
  }
  std::unique_ptr<ChangeWatch> do_watch() override;
  std::vector<Message> do_peek(const std::string&, std::size_t) override { not_yet("q peek"); }
  std::vector<Message> do_dead_letters(const std::string&, std::size_t) override {
    not_yet("dead letters");
  }
  void do_each_dead_letter(const std::string&,
                           const std::function<bool(const Message&)>&) override {
    not_yet("dead letters");
  }
  std::uint64_t do_purge_dead_letters(const std::string&) override { not_yet("dead letters"); }
  std::vector<Message> do_redrive(const std::string&, const RedriveOptions&) override {
    not_yet("q redrive");
  }
  std::optional<Message> do_find_dead_letter(const std::string&, const std::string&) override {
    not_yet("dead letters");
  }
  std::vector<std::string> do_delete_dead_letters(const std::string&,
                                                  const std::vector<std::string>&) override {
    not_yet("dead letters");
  }
  void do_export_messages(const std::string&, const std::function<void(const Message&)>&) override {
    not_yet("q export");
  }
  std::vector<std::string> do_import_messages(const std::string&, std::vector<Message>, bool,
                                              bool) override {
    not_yet("q import");
  }
  void do_pause(const std::string&, Millis, const std::string&) override { not_yet("q pause"); }
  std::optional<Pause> do_resume(const std::string&) override { not_yet("q resume"); }
  std::optional<Message> do_show(const std::string&, const std::string&) override {
    not_yet("q show");
  }
  // The registry names q work's command line in a delivery's attempt
  // history (q show); nats:// keeps no attempt history, so nothing to name.
  void do_register_worker(std::uint32_t, Millis, const std::string&) override {}
  void do_unregister_worker(std::uint32_t, Millis) override {}
  void do_backup(const std::string&) override { not_yet("q backup"); }
  std::vector<std::string> do_verify() override { not_yet("q verify"); }

 private:
  Client client_;
  Names names_;
  SystemClock system_clock_;
  const Clock* clock_;
  int replicas_ = 1;
  nats::LeaseBook leases_{client_, *clock_};
  nats::Groups groups_{client_, names_};
  nats::DoneBook done_{client_};
  nats::RateBudget rate_{client_, *clock_};

  std::optional<StoredQueue> load(const std::string& queue) {
    auto r = client_.get(Names::config_key(queue));
    if (!r) return std::nullopt;
    return nats::parse_config(queue, *r);
  }
  StoredQueue must_load(const std::string& queue) {
    auto have = load(queue);
    if (!have) no_such_queue(queue);
    return *have;
  }

  // ---- streams and consumers ----------------------------------------------------

  static Millis consumer_ack_wait(const QueueConfig& c) {
    // JetStream's timer only wakes a receive; the lease decides. 0 is not an
    // AckWait JetStream takes, so a 0s visibility timeout runs on 1s and a NAK.
    return std::max<Millis>(c.visibility_timeout, kSecond);
  }

  void ensure_stream(const std::string& queue, const QueueConfig& c, bool create) {
    std::string name = names_.stream(queue);
    // A FIFO queue: one subject per message group (nats_groups.hpp).
    std::string subj = c.fifo ? groups_.filter(queue) : names_.subject(queue);
    const char* subjects[] = {subj.c_str()};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = name.c_str();
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Retention = js_WorkQueuePolicy;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = replicas_;
    cfg.MaxAge = c.retention * kNs;
    // Nats-Msg-Id dedup has one window per stream, never longer than MaxAge.
    // With no dedup window q still sends an id (its own, for safe retries),
    // remembered for 2 minutes.
    Millis window = c.dedup_window > 0 ? c.dedup_window : 2 * kMinute;
    cfg.Duplicates = std::min(window, c.retention) * kNs;
    cfg.MaxMsgs = c.max_depth > 0 ? static_cast<int64_t>(c.max_depth) : -1;
    cfg.Discard = js_DiscardNew;
    jsErrCode code{};
    natsStatus s = client_.retry(
        "setting up the stream of queue " + names_.stream(queue),
        [&](jsErrCode* err) {
          jsStreamInfo* si = nullptr;
          natsStatus st = create ? js_AddStream(&si, client_.js(), &cfg, nullptr, err)
                                 : js_UpdateStream(&si, client_.js(), &cfg, nullptr, err);
          // A stream left by an earlier create that was cut short, or settings changed.
          if (create && st != NATS_OK && !nats::transient(st, *err))
            st = js_UpdateStream(&si, client_.js(), &cfg, nullptr, err);
          jsStreamInfo_Destroy(si);
          return st;
        },
        &code);
    if (s != NATS_OK) client_.fail("setting up the stream of queue " + queue, s, code);
  }

  void ensure_consumer(const std::string& queue, const QueueConfig& c, bool create) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = kConsumer;
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = consumer_ack_wait(c) * kNs;
    cc.MaxDeliver = -1;     // q counts receives in its lease records
    cc.MaxAckPending = -1;  // in flight is not limited per consumer
    std::string name = names_.stream(queue);
    jsErrCode code{};
    natsStatus s = client_.retry(
        "setting up the consumer of queue " + queue,
        [&](jsErrCode* err) {
          jsConsumerInfo* ci = nullptr;
          natsStatus st =
              create ? js_AddConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err)
                     : js_UpdateConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err);
          if (create && st != NATS_OK && !nats::transient(st, *err))
            st = js_UpdateConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err);
          jsConsumerInfo_Destroy(ci);
          return st;
        },
        &code);
    if (s != NATS_OK) client_.fail("setting up the consumer of queue " + queue, s, code);
  }

  jsStreamState stream_state(const std::string& queue) {
    jsStreamState state{};
    jsErrCode code{};
    natsStatus s = client_.retry(
        "reading queue " + queue,
        [&](jsErrCode* err) {
          jsStreamInfo* si = nullptr;
          natsStatus st =
              js_GetStreamInfo(&si, client_.js(), names_.stream(queue).c_str(), nullptr, err);
          if (st == NATS_OK) {
            state = si->State;
            state.Subjects = nullptr;
            state.Deleted = nullptr;
            state.Lost = nullptr;
          }
          jsStreamInfo_Destroy(si);
          return st;
        },
        &code);
    if (s != NATS_OK) client_.fail("reading queue " + queue, s, code);
    return state;
  }

  // One pull request to the queue's consumer, by hand rather than through
  // natsSubscription_Fetch: `no_wait` answers at once when nothing is there,
  // and with `expires` the consumer's leader holds the request until a
  // message arrives (a send wakes it at once) or the wait is over; either way
  // it ends the request as soon as it delivered what it had (2.9 semantics).
  std::vector<MsgPtr> pull(const std::string& queue, int batch, Millis wait) {
    std::vector<MsgPtr> out;
    natsInbox* inbox = nullptr;
    natsSubscription* raw = nullptr;
    natsStatus s = natsInbox_Create(&inbox);
    std::unique_ptr<natsInbox, nats::Deleter<natsInbox, natsInbox_Destroy>> hold(inbox);
    if (s == NATS_OK) s = natsConnection_SubscribeSync(&raw, client_.nc(), inbox);
    nats::SubPtr sub(raw);
    json req = {{"batch", batch}, {"no_wait", true}};
    if (wait > 0) req["expires"] = wait * kNs;
    std::string body = req.dump();
    std::string subj = "$JS.API.CONSUMER.MSG.NEXT." + names_.stream(queue) + "." + kConsumer;
    if (s == NATS_OK)
      s = natsConnection_PublishRequest(client_.nc(), subj.c_str(), inbox, body.data(),
                                        static_cast<int>(body.size()));
    if (s != NATS_OK) client_.fail("receiving from queue " + queue, s, {});
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait + 2000);
    while (static_cast<int>(out.size()) < batch) {
      Millis left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
      if (left <= 0) break;
      natsMsg* m = nullptr;
      s = natsSubscription_NextMsg(&m, sub.get(), left);
      MsgPtr msg(m);
      if (s == NATS_TIMEOUT) break;
      if (s != NATS_OK) client_.fail("receiving from queue " + queue, s, {});
      // A status (404 no messages, 408 request over, 409 ...) ends the request.
      if (!nats::header(msg.get(), "Status").empty()) break;
      out.push_back(std::move(msg));
    }
    return out;
  }

  QueueStats stats_of(const std::string& queue, const StoredQueue& have) {
    QueueStats st;
    st.name = queue;
    st.config = have.config;
    st.created_at = have.created_at;
    jsStreamState state = stream_state(queue);
    Millis now = clock_->now();
    std::uint64_t in_flight = 0, delayed = 0;
    client_.each(Names::lease_prefix(queue) + "*", [&](const std::string& key, const Record& r) {
      // Messages leave a work-queue stream by ack (their lease goes with
      // them), purge (leases too) or age, oldest first: a lease below the
      // first sequence outlived its message (MaxAge) and counts for nothing.
      std::uint64_t seq = std::stoull(key.substr(key.rfind('.') + 1));
      if (state.Msgs == 0 || seq < state.FirstSeq) return;
      Lease l = Lease::decode(r.value);
      if (l.state == Lease::Acked || (l.state == Lease::Leased && l.until > now))
        ++in_flight;
      else if (l.state == Lease::Released && l.until > now)
        ++delayed;
    });
    // A work-queue stream holds exactly the messages not yet acked.
    st.in_flight = std::min<std::uint64_t>(in_flight, state.Msgs);
    st.delayed = std::min<std::uint64_t>(delayed, state.Msgs - st.in_flight);
    st.visible = state.Msgs - st.in_flight - st.delayed;
    if (state.Msgs > 0) st.oldest_age = std::max<Millis>(0, now - state.FirstTime / kNs);
    st.counters.sent = state.LastSeq;
    if (have.config.fifo) {
      // Groups with messages: the group subjects in the stream. Only heads
      // are leased, so the messages in flight are the held groups.
      st.groups = static_cast<std::uint64_t>(state.NumSubjects);
      st.held_groups = st.in_flight;
    }
    return st;
  }
};

std::unique_ptr<ChangeWatch> NatsBroker::do_watch() { return nats::watch(client_, names_.ns); }

}  // namespace

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options) {
  return std::make_unique<NatsBroker>(nats::parse_location(options.location), options.timeout,
                                      options.clock);
}

}  // namespace q
