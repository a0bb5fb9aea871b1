// NatsBroker: q's queues on JetStream. One work-queue stream and one durable
// pull consumer per queue hold and deliver the messages; q's own records (the
// queue's settings and one lease per delivered message) live in one KV-shaped
// bucket per namespace and are changed only by compare-and-set. JetStream has
// no fencing of acks, so every ack, extend and nack first wins a CAS on the
// message's lease record; a receipt whose lease was replaced is stale.
// ARCHITECTURE.md, "Distributed backend (NATS JetStream)", has the whole design.
#include "libq/nats/broker_impl.hpp"

namespace q::nats {
[[noreturn]] void no_such_queue(const std::string& queue) {
  throw Error(ErrorKind::NotFound, fmt::format("queue {}: no such queue", queue))
      .with_remedy(Remedy::CreateQueue, queue);
}

bool NatsBroker::do_create_queue(const std::string& queue, const ConfigChange& change) {
  QueueConfig config = apply(default_config(), change);
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
    dead_.ensure_stream(queue);
    counters_.ensure_stream();
    if (client_.put_if(Names::config_key(queue), nats::encode_config(config, clock_->now()), 0))
      return true;
  }
  throw Error(ErrorKind::Busy, fmt::format("queue {}: created and deleted by others while "
                                           "this create ran; try again",
                                           queue));
}

QueueConfig NatsBroker::do_configure(const std::string& queue, const ConfigChange& change) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    StoredQueue have = must_load(queue);
    // Nothing to change (q work and q config reading the settings): no
    // write, so consumers starting together do not race on the record.
    if (change.empty()) return have.config;
    check_kind_kept(queue, have.config, change);
    QueueConfig config = apply(have.config, change);
    validate(config);
    ensure_stream(queue, config, false);
    ensure_consumer(queue, config, false);
    if (client_.put_if(Names::config_key(queue),
                       nats::encode_config(config, have.created_at, have.pause), have.revision))
      return config;
  }
  throw Error(
      ErrorKind::Busy,
      fmt::format("queue {}: its settings kept changing under this config; try again", queue));
}

RemovedCounts NatsBroker::do_delete_queue(const std::string& queue) {
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
  holders_.forget(queue);
  client_.purge("done." + nats::encode_name(queue) + ".*");
  counts.dead_letters = dead_.delete_stream(queue);
  client_.purge(nats::Groups::wait_prefix(queue) + "*");
  client_.purge(nats::RateBudget::key(queue));
  counters_.remove(queue);
  return counts;
}

std::vector<std::string> NatsBroker::do_list_queues() {
  std::vector<std::string> names;
  client_.each("config.*", [&](const std::string& key, const Record&) {
    if (auto name = nats::decode_name(key.substr(key.find('.') + 1))) names.push_back(*name);
  });
  std::sort(names.begin(), names.end());
  return names;
}

void NatsBroker::do_pause(const std::string& queue, Millis until, const std::string& reason) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    StoredQueue have = must_load(queue);
    Millis now = clock_->now();
    if (until != 0 && until <= now)
      throw Error(ErrorKind::Usage, "--for: the pause must end in the future");
    if (client_.put_if(Names::config_key(queue),
                       nats::encode_config(have.config, have.created_at, Pause{now, until, reason}),
                       have.revision))
      return;
  }
  busy_settings(queue, "pause");
}

std::optional<Pause> NatsBroker::do_resume(const std::string& queue) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    StoredQueue have = must_load(queue);
    if (!have.pause) return std::nullopt;
    auto was = active_pause(have);
    if (client_.put_if(Names::config_key(queue), nats::encode_config(have.config, have.created_at),
                       have.revision))
      return was;
  }
  busy_settings(queue, "resume");
}

std::optional<StoredQueue> NatsBroker::load(const std::string& queue) {
  auto r = client_.get(Names::config_key(queue));
  if (!r) return std::nullopt;
  return nats::parse_config(queue, *r);
}

std::optional<Pause> NatsBroker::active_pause(const StoredQueue& have) const {
  if (have.pause && (have.pause->until == 0 || have.pause->until > clock_->now()))
    return have.pause;
  return std::nullopt;
}

[[noreturn]] void NatsBroker::busy_settings(const std::string& queue, const char* what) {
  throw Error(
      ErrorKind::Busy,
      fmt::format("queue {}: its settings kept changing under this {}; try again", queue, what));
}

StoredQueue NatsBroker::must_load(const std::string& queue) {
  auto have = load(queue);
  if (!have) no_such_queue(queue);
  return *have;
}

Millis NatsBroker::consumer_ack_wait(const QueueConfig& c) {
  // JetStream's timer only wakes a receive; the lease decides. 0 is not an
  // AckWait JetStream takes, so a 0s visibility timeout runs on 1s and a NAK.
  return std::max<Millis>(c.visibility_timeout, kSecond);
}

void NatsBroker::ensure_stream(const std::string& queue, const QueueConfig& c, bool create) {
  std::string name = names_.stream(queue);
  // A FIFO queue: two subjects per message group (nats/groups.hpp).
  std::vector<std::string> subj =
      c.fifo ? groups_.filters(queue) : std::vector<std::string>{names_.subject(queue)};
  std::vector<const char*> subjects;
  for (const auto& f : subj) subjects.push_back(f.c_str());
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  cfg.Subjects = subjects.data();
  cfg.SubjectsLen = static_cast<int>(subjects.size());
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

void NatsBroker::ensure_consumer(const std::string& queue, const QueueConfig& c, bool create) {
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = kConsumer;
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverAll;
  cc.AckWait = consumer_ack_wait(c) * kNs;
  cc.MaxDeliver = -1;  // q counts receives in its lease records
  // In flight is not limited per consumer. nats.c 3.4.1 leaves a
  // MaxAckPending of 0 or less out of the request, and nats-server 2.9
  // then gives an explicit-ack consumer its default of 1000 (at which a
  // pull waits, and every receive finds nothing): ask for a limit no queue
  // reaches instead.
  cc.MaxAckPending = kMaxAckPending;
  std::string name = names_.stream(queue);
  jsErrCode code{};
  natsStatus s = client_.retry(
      "setting up the consumer of queue " + queue,
      [&](jsErrCode* err) {
        jsConsumerInfo* ci = nullptr;
        natsStatus st = create
                            ? js_AddConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err)
                            : js_UpdateConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err);
        if (create && st != NATS_OK && !nats::transient(st, *err))
          st = js_UpdateConsumer(&ci, client_.js(), name.c_str(), &cc, nullptr, err);
        jsConsumerInfo_Destroy(ci);
        return st;
      },
      &code);
  if (s != NATS_OK) client_.fail("setting up the consumer of queue " + queue, s, code);
}

std::int64_t NatsBroker::consumer_max_ack_pending(const std::string& queue) {
  std::int64_t max = 0;
  client_.retry("reading the consumer of queue " + queue, [&](jsErrCode* err) {
    jsConsumerInfo* ci = nullptr;
    natsStatus st = js_GetConsumerInfo(&ci, client_.js(), names_.stream(queue).c_str(), kConsumer,
                                       nullptr, err);
    if (st == NATS_OK && ci->Config) max = ci->Config->MaxAckPending;
    jsConsumerInfo_Destroy(ci);
    return st;
  });
  return max;
}

nats::MsgPtr NatsBroker::stored(const std::string& queue, std::uint64_t seq) {
  return client_.stored_message(names_.stream(queue), seq, "reading queue " + queue);
}

jsStreamState NatsBroker::stream_state(const std::string& queue) {
  std::string what = "reading queue " + queue;
  auto state = client_.stream_state(names_.stream(queue), what);
  if (!state) client_.fail(what, NATS_NOT_FOUND, kStreamNotFound);
  return *state;
}

}  // namespace q::nats

namespace q {

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options) {
  return std::make_unique<nats::NatsBroker>(nats::parse_location(options.location),
                                            options.credentials, options.timeout, options.clock,
                                            options.location);
}

}  // namespace q
