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
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nats_client.hpp"
#include "records.hpp"
#include "sha256.hpp"
#include "timefmt.hpp"

namespace q {
namespace {

using nats::Client;
using nats::MsgPtr;
using nats::Record;
using json = nlohmann::json;

constexpr Millis kNs = 1'000'000;  // nanoseconds per millisecond
constexpr const char* kConsumer = "q";
constexpr jsErrCode kStoreFailed = static_cast<jsErrCode>(10077);
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

// ---- stored records ---------------------------------------------------------

json config_json(const QueueConfig& c, Millis created_at) {
  return {{"v", 1},
          {"visibility_timeout", c.visibility_timeout},
          {"max_receives", c.max_receives},
          {"retention", c.retention},
          {"delay", c.delay},
          {"max_depth", c.max_depth},
          {"max_size", c.max_size},
          {"dedup_window", c.dedup_window},
          {"rate", c.rate},
          {"fifo", c.fifo},
          {"content_dedup", c.content_dedup},
          {"created_at", created_at},
          {"w", nats::random_token()}};
}

struct StoredQueue {
  QueueConfig config;
  Millis created_at = 0;
  std::uint64_t revision = 0;
};

StoredQueue parse_config(const std::string& queue, const Record& r) {
  try {
    auto j = json::parse(r.value);
    StoredQueue s;
    s.config.visibility_timeout = j.at("visibility_timeout");
    s.config.max_receives = j.at("max_receives");
    s.config.retention = j.at("retention");
    s.config.delay = j.at("delay");
    s.config.max_depth = j.at("max_depth");
    s.config.max_size = j.at("max_size");
    s.config.dedup_window = j.at("dedup_window");
    s.config.rate = j.at("rate");
    s.config.fifo = j.at("fifo");
    s.config.content_dedup = j.at("content_dedup");
    s.created_at = j.at("created_at");
    s.revision = r.revision;
    return s;
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Io,
                fmt::format("queue {}: its settings record is damaged ({})", queue, e.what()));
  }
}

// q's lease on one message: who may act on it, until when. The receipt is
// the message id and `nonce`; any write of the record goes through a CAS on
// its revision, so of two racing writers exactly one wins.
struct Lease {
  enum State : char { Leased = 'l', Released = 'r', Acked = 'a' };
  State state = Leased;
  std::uint64_t nonce = 0;   // of the receipt of the current delivery
  Millis until = 0;          // Leased: visible again at; Released: delayed until
  Millis received_at = 0;    // last receive
  Millis first_received_at = 0;
  std::uint32_t receives = 0;
  std::string reply;         // the JetStream ack subject of the current delivery
  std::string reason;        // of the last nack

  std::string encode() const {
    return json{{"s", std::string(1, static_cast<char>(state))},
                {"k", nonce},
                {"u", until},
                {"r", received_at},
                {"f", first_received_at},
                {"n", receives},
                {"a", reply},
                {"why", reason},
                {"w", nats::random_token()}}
        .dump();
  }
  static Lease decode(const std::string& text) {
    Lease l;
    try {
      auto j = json::parse(text);
      l.state = static_cast<State>(j.at("s").get<std::string>().at(0));
      l.nonce = j.at("k");
      l.until = j.at("u");
      l.received_at = j.at("r");
      l.first_received_at = j.at("f");
      l.receives = j.at("n");
      l.reply = j.at("a");
      l.reason = j.value("why", "");
    } catch (const std::exception& e) {
      throw Error(ErrorKind::Io, fmt::format("a lease record is damaged ({})", e.what()));
    }
    return l;
  }
};

std::string header(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || !value) return {};
  return value;
}

std::string nak_body(Millis delay) {
  if (delay <= 0) return "-NAK";
  return fmt::format("-NAK {{\"delay\": {}}}", delay * kNs);
}

class NatsBroker final : public Broker {
 public:
  NatsBroker(const nats::Location& location, Millis timeout, const Clock* clock)
      : client_(location, timeout), clock_(clock ? clock : &system_clock_) {
    replicas_ = std::min(3, client_.cluster_size());
    client_.open_bucket("q_" + location.ns, replicas_);
    std::random_device rd;
    random_.seed((static_cast<std::uint64_t>(rd()) << 32) | rd());
  }

  // ---- queues ---------------------------------------------------------------

  bool create_queue(const std::string& queue, const ConfigChange& change) override {
    check_queue_name(queue);
    check_new_queue_name(queue);
    if (change.fifo && *change.fifo) not_yet("FIFO queues (--fifo)");
    QueueConfig config = apply(QueueConfig{}, change);
    validate(config);
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (auto have = load(queue)) {
        check_agrees(queue, have->config, change);
        return false;
      }
      // The streams first, the settings record last: the record is what makes
      // the queue exist, so a create cut short leaves nothing a command sees.
      ensure_stream(queue, config, true);
      ensure_consumer(queue, config, true);
      if (client_.put_if(config_key(queue), config_json(config, clock_->now()).dump(), 0))
        return true;
    }
    throw Error(ErrorKind::Busy, fmt::format("queue {}: created and deleted by others while "
                                             "this create ran; try again", queue));
  }

  QueueConfig configure(const std::string& queue, const ConfigChange& change) override {
    check_queue_name(queue);
    for (int attempt = 0; attempt < 5; ++attempt) {
      StoredQueue have = must_load(queue);
      if (change.fifo && *change.fifo != have.config.fifo)
        throw Error(ErrorKind::Usage,
                    fmt::format("queue {}: a queue's kind (FIFO or standard) cannot change",
                                queue));
      QueueConfig config = apply(have.config, change);
      validate(config);
      ensure_stream(queue, config, false);
      ensure_consumer(queue, config, false);
      if (client_.put_if(config_key(queue), config_json(config, have.created_at).dump(),
                         have.revision))
        return config;
    }
    throw Error(ErrorKind::Busy,
                fmt::format("queue {}: its settings kept changing under this config; try again",
                            queue));
  }

  RemovedCounts delete_queue(const std::string& queue) override {
    check_queue_name(queue);
    StoredQueue have = must_load(queue);
    RemovedCounts counts;
    counts.messages = stream_state(queue).Msgs;
    client_.remove(have.revision);
    jsErrCode code{};
    natsStatus s = client_.retry("deleting queue " + queue, [&](jsErrCode* err) {
      return js_DeleteStream(client_.js(), stream(queue).c_str(), nullptr, err);
    }, &code);
    if (s != NATS_OK && code != kStreamNotFound) client_.fail("deleting queue " + queue, s, code);
    client_.purge(lease_prefix(queue) + "*");
    return counts;
  }

  std::vector<std::string> list_queues() override {
    std::vector<std::string> names;
    client_.each("config.*", [&](const std::string& key, const Record&) {
      if (auto name = nats::decode_name(key.substr(key.find('.') + 1))) names.push_back(*name);
    });
    std::sort(names.begin(), names.end());
    return names;
  }

  // ---- send -------------------------------------------------------------------

  std::vector<SendResult> send(const std::string& queue, std::vector<OutgoingMessage> messages,
                               const SendOptions& options) override {
    check_queue_name(queue);
    auto have = load(queue);
    if (!have && options.create_queue) {
      create_queue(queue, {});
      have = load(queue);
    }
    if (!have) no_such_queue(queue);
    const QueueConfig& config = have->config;
    if (config.fifo) not_yet("sending to a FIFO queue");
    if (options.at || (options.delay && *options.delay > 0) ||
        (!options.delay && config.delay > 0))
      not_yet("delayed messages (--delay, --at, a queue's delay)");
    std::size_t max_payload = static_cast<std::size_t>(natsConnection_GetMaxPayload(client_.nc()));
    std::size_t index = 0;
    for (const auto& m : messages) {
      ++index;
      if (!m.group.empty()) not_yet("message groups (--group)");
      check_attributes(queue, m.attributes);
      if (m.body.size() > config.max_size)
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: message {} is {} bytes, over the queue's max size of "
                                "{} bytes; nothing was sent",
                                queue, index, m.body.size(), config.max_size));
      // Headers (attributes, ids) travel in the same NATS message as the body.
      if (m.body.size() + 1024 + attributes_json(m.attributes).size() > max_payload)
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
    std::vector<Outgoing> out;
    out.reserve(messages.size());
    for (auto& m : messages) out.push_back(prepare(queue, config, m));
    if (out.size() > 1) publish_async(queue, out);
    std::vector<SendResult> results;
    for (auto& o : out) {
      if (!o.done) publish_sync(queue, o, out.size() > 1);
      results.push_back({message_id(o.seq), o.duplicate});
    }
    return results;
  }

  // ---- receive and the lease records ------------------------------------------

  std::vector<Message> receive(const std::string& queue, const ReceiveOptions& options) override {
    check_queue_name(queue);
    StoredQueue have = must_load(queue);
    if (have.config.fifo) not_yet("receiving from a FIFO queue");
    if (options.rate_limited && have.config.rate > 0) not_yet("a queue's shared --rate");
    if (options.visibility_timeout &&
        (*options.visibility_timeout < 0 || *options.visibility_timeout > kMaxVisibilityTimeout))
      throw Error(ErrorKind::Usage, fmt::format("--visibility-timeout {}: must be between 0s and "
                                                "12h",
                                                format_duration(*options.visibility_timeout)));
    Millis vt = options.visibility_timeout.value_or(have.config.visibility_timeout);
    Millis ack_wait = consumer_ack_wait(have.config);
    std::vector<Message> got;
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      Millis left = options.wait - std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count();
      auto batch = pull(queue, static_cast<int>(options.max_messages - got.size()),
                        std::max<Millis>(left, 0));
      for (auto& msg : batch)
        if (auto m = take(queue, msg.get(), vt, ack_wait)) got.push_back(std::move(*m));
      if (!got.empty() || left <= 0) return got;
    }
  }

  std::vector<ReceiptResult> ack(const std::string& queue,
                                 const std::vector<std::string>& receipts) override {
    check_queue_name(queue);
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
        auto [seq, lease, revision] = current(queue, receipt);
        (void)seq;
        Lease acked = lease;
        acked.state = Lease::Acked;
        auto rev = change_lease(queue, receipt, seq, acked, revision);
        // Decided: the lease says acked, so no receive hands the message out
        // again (one that gets it finishes this ack). Now tell JetStream; if
        // the cluster does not answer, the ack stands all the same.
        try {
          client_.request(lease.reply, "+ACK");
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

  Millis extend(const std::string& queue, const std::string& receipt, Millis by) override {
    if (by < 0 || by > kMaxVisibilityTimeout)
      throw Error(ErrorKind::Usage, fmt::format("--by {}: must be between 0s and 12h",
                                                format_duration(by)));
    check_queue_name(queue);
    must_load(queue);
    auto [seq, lease, revision] = current(queue, receipt);
    Millis now = clock_->now();
    Millis until = now + by;
    Millis limit = lease.received_at + kMaxVisibilityTimeout;
    if (until > limit)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("receipt {}: cannot extend to {}: a message may be held at most "
                              "12h after its receive (until {})",
                              receipt, format_time(until), format_time(limit)));
    Lease next = lease;
    next.until = until;
    change_lease(queue, receipt, seq, next, revision);
    // `-NAK {"delay"}` on a pending message moves its redelivery to now+delay
    // and keeps it pending: JetStream's timer follows the lease.
    rearm(lease.reply, by);
    return until;
  }

  Millis nack(const std::string& queue, const std::string& receipt,
              const NackOptions& options) override {
    if (options.delay < 0 || options.delay > kMaxDelay)
      throw Error(ErrorKind::Usage, fmt::format("--delay {}: must be between 0s and 12h",
                                                format_duration(options.delay)));
    if (options.reason.size() > kMaxReason)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("--reason: {} bytes, at most {} are kept", options.reason.size(),
                              kMaxReason));
    check_queue_name(queue);
    must_load(queue);
    auto [seq, lease, revision] = current(queue, receipt);
    Millis delay = options.delay;
    if (options.backoff) {
      double unit = static_cast<double>(random_() >> 11) * 0x1.0p-53;
      delay = backoff_delay(options.backoff_base, options.backoff_cap, lease.receives, unit);
    }
    Millis now = clock_->now();
    Lease next = lease;
    next.state = Lease::Released;
    next.until = now + delay;
    if (!options.reason.empty()) next.reason = options.reason;
    change_lease(queue, receipt, seq, next, revision);
    rearm(lease.reply, delay);
    return now + delay;
  }

  // ---- stats ------------------------------------------------------------------

  std::vector<QueueStats> stats(const std::string& queue) override {
    std::vector<QueueStats> out;
    if (!queue.empty()) {
      check_queue_name(queue);
      out.push_back(stats_of(queue, must_load(queue)));
      return out;
    }
    for (const auto& name : list_queues())
      if (auto have = load(name)) out.push_back(stats_of(name, *have));
    return out;
  }

  std::uint64_t purge(const std::string& queue) override {
    check_queue_name(queue);
    must_load(queue);
    std::uint64_t removed = stream_state(queue).Msgs;
    jsErrCode code{};
    natsStatus s = client_.retry("purging queue " + queue, [&](jsErrCode* err) {
      return js_PurgeStream(client_.js(), stream(queue).c_str(), nullptr, err);
    }, &code);
    if (s != NATS_OK) client_.fail("purging queue " + queue, s, code);
    client_.purge(lease_prefix(queue) + "*");
    return removed;
  }

  // ---- not on this backend yet (issue 16) ---------------------------------------

  void dead_letter(const std::string&, const std::string&, const std::string&) override {
    not_yet("dead-lettering a delivery");
  }
  ReceiptOutcome ack_done(const std::string&, const std::string&, const std::string&,
                          Millis) override {
    not_yet("idempotency keys (q work)");
  }
  bool is_done(const std::string&, const std::string&) override {
    not_yet("idempotency keys (q work)");
  }
  Millis next_delivery(const std::string&, bool) override { not_yet("q work"); }
  std::unique_ptr<ChangeWatch> watch() override { not_yet("watching for changes"); }
  std::vector<Message> peek(const std::string&, std::size_t) override { not_yet("q peek"); }
  std::vector<Message> dead_letters(const std::string&, std::size_t) override {
    not_yet("dead letters");
  }
  void each_dead_letter(const std::string&, const std::function<bool(const Message&)>&) override {
    not_yet("dead letters");
  }
  std::uint64_t purge_dead_letters(const std::string&) override { not_yet("dead letters"); }
  std::vector<Message> redrive(const std::string&, const RedriveOptions&) override {
    not_yet("q redrive");
  }
  std::optional<Message> find_dead_letter(const std::string&, const std::string&) override {
    not_yet("dead letters");
  }
  std::vector<std::string> delete_dead_letters(const std::string&,
                                               const std::vector<std::string>&) override {
    not_yet("dead letters");
  }
  void export_messages(const std::string&, const std::function<void(const Message&)>&) override {
    not_yet("q export");
  }
  std::vector<std::string> import_messages(const std::string&, std::vector<Message>,
                                           bool) override {
    not_yet("q import");
  }
  void backup(const std::string&) override { not_yet("q backup"); }
  std::vector<std::string> verify() override { not_yet("q verify"); }

 private:
  Client client_;
  SystemClock system_clock_;
  const Clock* clock_;
  int replicas_ = 1;
  std::mt19937_64 random_;

  // ---- names --------------------------------------------------------------------
  // The namespace has no '_', so "Q_<ns>_<queue>" cannot be read two ways.
  std::string stream(const std::string& queue) const {
    return "Q_" + client_.location().ns + "_" + nats::encode_name(queue);
  }
  std::string subject(const std::string& queue) const {
    return "q." + client_.location().ns + "." + nats::encode_name(queue);
  }
  static std::string config_key(const std::string& queue) {
    return "config." + nats::encode_name(queue);
  }
  static std::string lease_prefix(const std::string& queue) {
    return "lease." + nats::encode_name(queue) + ".";
  }
  static std::string lease_key(const std::string& queue, std::uint64_t seq) {
    return lease_prefix(queue) + std::to_string(seq);
  }

  static void check_queue_name(const std::string& queue) {
    if (!is_valid_queue_name(queue))
      throw Error(ErrorKind::Usage,
                  fmt::format("queue name '{}': use 1 to {} letters, digits, '-', '_' or '.'",
                              queue, kMaxQueueName));
  }

  std::optional<StoredQueue> load(const std::string& queue) {
    auto r = client_.get(config_key(queue));
    if (!r) return std::nullopt;
    return parse_config(queue, *r);
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
    std::string name = stream(queue);
    std::string subj = subject(queue);
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
    natsStatus s = client_.retry("setting up the stream of queue " + stream(queue),
                                 [&](jsErrCode* err) {
      jsStreamInfo* si = nullptr;
      natsStatus st = create ? js_AddStream(&si, client_.js(), &cfg, nullptr, err)
                             : js_UpdateStream(&si, client_.js(), &cfg, nullptr, err);
      // A stream left by an earlier create that was cut short, or settings changed.
      if (create && st != NATS_OK && !nats::transient(st, *err))
        st = js_UpdateStream(&si, client_.js(), &cfg, nullptr, err);
      jsStreamInfo_Destroy(si);
      return st;
    }, &code);
    if (s != NATS_OK) client_.fail("setting up the stream of queue " + queue, s, code);
  }

  void ensure_consumer(const std::string& queue, const QueueConfig& c, bool create) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = kConsumer;
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = consumer_ack_wait(c) * kNs;
    cc.MaxDeliver = -1;      // q counts receives in its lease records
    cc.MaxAckPending = -1;   // in flight is not limited per consumer
    std::string name = stream(queue);
    jsErrCode code{};
    natsStatus s = client_.retry("setting up the consumer of queue " + queue,
                                 [&](jsErrCode* err) {
      jsConsumerInfo* ci = nullptr;
      natsStatus st = create ? js_AddConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err)
                             : js_UpdateConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr,
                                                 err);
      if (create && st != NATS_OK && !nats::transient(st, *err))
        st = js_UpdateConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err);
      jsConsumerInfo_Destroy(ci);
      return st;
    }, &code);
    if (s != NATS_OK) client_.fail("setting up the consumer of queue " + queue, s, code);
  }

  jsStreamState stream_state(const std::string& queue) {
    jsStreamState state{};
    jsErrCode code{};
    natsStatus s = client_.retry("reading queue " + queue, [&](jsErrCode* err) {
      jsStreamInfo* si = nullptr;
      natsStatus st = js_GetStreamInfo(&si, client_.js(), stream(queue).c_str(), nullptr, err);
      if (st == NATS_OK) {
        state = si->State;
        state.Subjects = nullptr;
        state.Deleted = nullptr;
        state.Lost = nullptr;
      }
      jsStreamInfo_Destroy(si);
      return st;
    }, &code);
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
    std::string subj = "$JS.API.CONSUMER.MSG.NEXT." + stream(queue) + "." + kConsumer;
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
      if (!header(msg.get(), "Status").empty()) break;
      out.push_back(std::move(msg));
    }
    return out;
  }

  // ---- sending ------------------------------------------------------------------

  struct Outgoing {
    MsgPtr msg;
    std::string token;     // unique to this send (header Q-Send)
    bool own_id = false;   // Nats-Msg-Id is q's own (no dedup id of the user's)
    bool done = false;
    std::uint64_t seq = 0;
    bool duplicate = false;
  };

  static std::string attributes_json(const Attributes& attributes) {
    if (attributes.empty()) return {};
    json a = json::array();
    for (const auto& [k, v] : attributes) a.push_back({k, v});
    return a.dump(-1, ' ', true);  // ASCII only: a header value has no raw line breaks
  }

  Outgoing prepare(const std::string& queue, const QueueConfig& config, OutgoingMessage& m) {
    Outgoing o;
    o.token = nats::random_token();
    natsMsg* raw = nullptr;
    std::string subj = subject(queue);
    natsStatus s = natsMsg_Create(&raw, subj.c_str(), nullptr, m.body.data(),
                                  static_cast<int>(m.body.size()));
    o.msg.reset(raw);
    if (s != NATS_OK) client_.fail("sending to queue " + queue, s, {});
    std::string msg_id;
    if (!m.dedup_id.empty() && config.dedup_window > 0) {
      msg_id = "d" + sha256_hex(m.dedup_id);
    } else {
      msg_id = "s" + o.token;
      o.own_id = true;
    }
    natsMsgHeader_Set(raw, "Nats-Msg-Id", msg_id.c_str());
    natsMsgHeader_Set(raw, "Q-Send", o.token.c_str());
    natsMsgHeader_Set(raw, "Q-Sent-At", std::to_string(clock_->now()).c_str());
    if (!m.dedup_id.empty())
      natsMsgHeader_Set(raw, "Q-Dedup", json(m.dedup_id).dump(-1, ' ', true).c_str());
    if (!m.attributes.empty())
      natsMsgHeader_Set(raw, "Q-Attrs", attributes_json(m.attributes).c_str());
    return o;
  }

  [[noreturn]] void publish_failed(const std::string& queue, natsStatus s, jsErrCode code,
                                   const std::string& text) {
    if (code == kStoreFailed && text.find("maximum messages") != std::string::npos)
      throw Error(ErrorKind::Full,
                  fmt::format("queue {}: full (max depth reached while sending); the messages "
                              "before it were sent",
                              queue));
    client_.fail("sending to queue " + queue, s, code);
  }

  // A duplicate answer to a retried publish may be this very send, stored by
  // the attempt whose answer was lost: then it is no duplicate.
  void settle_duplicate(const std::string& queue, Outgoing& o, bool retried) {
    if (!o.duplicate) return;
    if (o.own_id) {
      o.duplicate = false;
      return;
    }
    if (!retried) return;
    natsMsg* raw = nullptr;
    jsErrCode code{};
    natsStatus s = client_.retry("sending to queue " + queue, [&](jsErrCode* err) {
      natsMsg_Destroy(raw);
      raw = nullptr;
      return js_GetMsg(&raw, client_.js(), stream(queue).c_str(), o.seq, nullptr, err);
    }, &code);
    MsgPtr stored(raw);
    if (s == NATS_OK && header(stored.get(), "Q-Send") == o.token) o.duplicate = false;
  }

  void publish_sync(const std::string& queue, Outgoing& o, bool tried_before) {
    int attempts = 0;
    jsErrCode code{};
    std::string text;
    natsStatus s = client_.retry("sending to queue " + queue, [&](jsErrCode* err) {
      ++attempts;
      jsPubAck* pa = nullptr;
      natsStatus st = js_PublishMsg(&pa, client_.js(), o.msg.get(), nullptr, err);
      if (st == NATS_OK) {
        o.seq = pa->Sequence;
        o.duplicate = pa->Duplicate;
      } else {
        text = nats_GetLastError(nullptr);
      }
      jsPubAck_Destroy(pa);
      return st;
    }, &code);
    if (s != NATS_OK) publish_failed(queue, s, code, text);
    o.done = true;
    settle_duplicate(queue, o, attempts > 1 || tried_before);
  }

  // Many messages: published without waiting for each answer (up to 256
  // outstanding); any without a good answer then goes again one by one
  // (same Nats-Msg-Id, so a message stored twice is stored once).
  void publish_async(const std::string& queue, std::vector<Outgoing>& out) {
    std::mutex mu;
    std::map<std::string, std::size_t> by_token;
    for (std::size_t i = 0; i < out.size(); ++i) by_token[out[i].token] = i;
    client_.on_pub_ack = [&](natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae) {
      std::lock_guard<std::mutex> lock(mu);
      auto it = by_token.find(header(msg, "Q-Send"));
      if (it != by_token.end() && pa && !pae) {
        Outgoing& o = out[it->second];
        o.seq = pa->Sequence;
        o.duplicate = pa->Duplicate;
        o.done = true;
      }
      natsMsg_Destroy(msg);
    };
    for (auto& o : out) {
      // The library takes the message it publishes; keep a copy for a retry.
      natsMsg* copy = nullptr;
      natsStatus s = natsMsg_Create(&copy, natsMsg_GetSubject(o.msg.get()), nullptr,
                                    natsMsg_GetData(o.msg.get()),
                                    natsMsg_GetDataLength(o.msg.get()));
      for (const char* key : {"Nats-Msg-Id", "Q-Send", "Q-Sent-At", "Q-Dedup", "Q-Attrs"})
        if (s == NATS_OK)
          if (auto v = header(o.msg.get(), key); !v.empty()) s = natsMsgHeader_Set(copy, key, v.c_str());
      if (s == NATS_OK) s = js_PublishMsgAsync(client_.js(), &copy, nullptr);
      natsMsg_Destroy(copy);
      if (s != NATS_OK) break;  // the rest go one by one
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 10 * kSecond;
    js_PublishAsyncComplete(client_.js(), &po);
    client_.on_pub_ack = nullptr;
    for (auto& o : out) {
      std::lock_guard<std::mutex> lock(mu);
      if (o.done) settle_duplicate(queue, o, false);
    }
  }

  // ---- delivery -----------------------------------------------------------------

  std::optional<Message> take(const std::string& queue, natsMsg* msg, Millis vt, Millis ack_wait) {
    jsMsgMetaData* meta_raw = nullptr;
    if (natsMsg_GetMetaData(&meta_raw, msg) != NATS_OK) return std::nullopt;
    nats::MetaPtr meta(meta_raw);
    std::uint64_t seq = meta->Sequence.Stream;
    std::string reply = natsMsg_GetReply(msg) ? natsMsg_GetReply(msg) : "";
    std::string key = lease_key(queue, seq);
    for (int attempt = 0; attempt < 3; ++attempt) {
      Millis now = clock_->now();
      auto cur = client_.get(key);
      Lease prev;
      if (cur) prev = Lease::decode(cur->value);
      if (cur && prev.state == Lease::Acked) {
        // Acked by a receipt holder who did not reach JetStream: finish it.
        client_.request(reply, "+ACK");
        client_.remove(cur->revision);
        return std::nullopt;
      }
      if (cur && prev.until > now) {
        // Still leased (or released with a delay): JetStream's timer ran
        // ahead of the lease. Re-arm it to the lease and pass.
        client_.request(reply, nak_body(prev.until - now));
        return std::nullopt;
      }
      Lease l;
      l.state = Lease::Leased;
      do l.nonce = random_(); while (l.nonce == 0);
      l.until = now + vt;
      l.received_at = now;
      l.first_received_at = cur ? prev.first_received_at : now;
      l.receives = (cur ? prev.receives : 0) + 1;
      l.reply = reply;
      l.reason = prev.reason;
      if (!client_.put_if(key, l.encode(), cur ? cur->revision : 0)) continue;
      if (vt != ack_wait) client_.request(reply, nak_body(vt));
      Message m;
      m.id = message_id(seq);
      m.receipt = store::receipt(seq, l.nonce);
      m.body.assign(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
      if (auto a = header(msg, "Q-Attrs"); !a.empty())
        for (const auto& kv : json::parse(a)) m.attributes.emplace_back(kv.at(0), kv.at(1));
      if (auto d = header(msg, "Q-Dedup"); !d.empty()) m.dedup_id = json::parse(d);
      if (auto t = header(msg, "Q-Sent-At"); !t.empty()) m.sent_at = std::stoll(t);
      m.receive_count = l.receives;
      m.state = MessageState::InFlight;
      m.visible_at = l.until;
      m.first_received_at = l.first_received_at;
      m.last_received_at = l.received_at;
      m.reason = l.reason;
      return m;
    }
    return std::nullopt;  // others kept changing the lease: leave the message to them
  }

  static std::string message_id(std::uint64_t seq) { return store::message_id(seq); }

  // Moves JetStream's redelivery of a pending message to now + delay. Once
  // the lease is written the decision stands: when the cluster does not
  // answer, the lease still rules (a delivery before its time is re-armed by
  // the receive that gets it), so this reports no failure.
  void rearm(const std::string& reply, Millis delay) {
    try {
      client_.request(reply, nak_body(delay));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Busy) throw;
    }
  }

  struct Current {
    std::uint64_t seq;
    Lease lease;
    std::uint64_t revision;
  };

  // The lease a receipt names, when it is still that delivery's; else
  // Error(Stale) saying why, or Error(InvalidData) for a malformed receipt.
  Current current(const std::string& queue, const std::string& receipt) {
    auto parsed = store::parse_receipt(receipt);
    if (!parsed)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("receipt '{}': malformed (expected the receipt printed by 'q "
                              "receive', like m1f.0123456789abcdef)",
                              receipt));
    auto id = message_id(parsed->seq);
    auto cur = client_.get(lease_key(queue, parsed->seq));
    if (!cur)
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} is no longer in queue {} (acked, "
                              "purged or expired)",
                              receipt, id, queue));
    Lease lease = Lease::decode(cur->value);
    if (lease.nonce != parsed->nonce || lease.state == Lease::Acked) {
      if (lease.state == Lease::Acked)
        throw Error(ErrorKind::Stale, fmt::format("receipt {}: stale: message {} is no longer "
                                                  "in queue {} (acked, purged or expired)",
                                                  receipt, id, queue));
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} was delivered again since (receive "
                              "count now {})",
                              receipt, id, lease.receives));
    }
    if (lease.state == Lease::Released)
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} was released (nack) after this "
                              "receipt was issued",
                              receipt, id));
    return {parsed->seq, std::move(lease), cur->revision};
  }

  // Writes `next` over the lease at `revision`; when another write came
  // first, reads again: the receipt may have gone stale meanwhile.
  std::uint64_t change_lease(const std::string& queue, const std::string& receipt,
                             std::uint64_t seq, Lease next, std::uint64_t revision) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (auto rev = client_.put_if(lease_key(queue, seq), next.encode(), revision)) return *rev;
      auto again = current(queue, receipt);  // throws Stale when it went stale
      revision = again.revision;
    }
    throw Error(ErrorKind::Busy,
                fmt::format("receipt {}: its lease kept changing; try again", receipt));
  }

  QueueStats stats_of(const std::string& queue, const StoredQueue& have) {
    QueueStats st;
    st.name = queue;
    st.config = have.config;
    st.created_at = have.created_at;
    jsStreamState state = stream_state(queue);
    Millis now = clock_->now();
    std::uint64_t in_flight = 0, delayed = 0;
    client_.each(lease_prefix(queue) + "*", [&](const std::string& key, const Record& r) {
      // Messages leave a work-queue stream by ack (their lease goes with
      // them), purge (leases too) or age, oldest first: a lease below the
      // first sequence outlived its message (MaxAge) and counts for nothing.
      std::uint64_t seq = std::stoull(key.substr(key.rfind('.') + 1));
      if (state.Msgs == 0 || seq < state.FirstSeq) return;
      Lease l = Lease::decode(r.value);
      if (l.state == Lease::Acked || (l.state == Lease::Leased && l.until > now)) ++in_flight;
      else if (l.state == Lease::Released && l.until > now) ++delayed;
    });
    // A work-queue stream holds exactly the messages not yet acked.
    st.in_flight = std::min<std::uint64_t>(in_flight, state.Msgs);
    st.delayed = std::min<std::uint64_t>(delayed, state.Msgs - st.in_flight);
    st.visible = state.Msgs - st.in_flight - st.delayed;
    if (state.Msgs > 0) st.oldest_age = std::max<Millis>(0, now - state.FirstTime / kNs);
    st.counters.sent = state.LastSeq;
    return st;
  }
};

}  // namespace

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options) {
  return std::make_unique<NatsBroker>(nats::parse_location(options.location), options.timeout,
                                      options.clock);
}

}  // namespace q
