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
#include <set>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nats_client.hpp"
#include "nats_counters.hpp"
#include "nats_history.hpp"
#include "nats_holders.hpp"
#include "nats_dead.hpp"
#include "nats_delay.hpp"
#include "nats_groups.hpp"
#include "nats_leases.hpp"
#include "nats_rate.hpp"
#include "nats_records.hpp"
#include "nats_send.hpp"
#include "nats_stage.hpp"
#include "nats_backup.hpp"
#include "nats_transfer.hpp"
#include "nats_verify.hpp"
#include "nats_watch.hpp"
#include "sha256.hpp"
#include "records.hpp"
#include "rules.hpp"
#include "sha256.hpp"
#include "timefmt.hpp"
#include "utf8.hpp"

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
constexpr std::int64_t kMaxAckPending = std::int64_t{1} << 30;
constexpr jsErrCode kStreamNotFound = static_cast<jsErrCode>(10059);

[[noreturn]] void no_such_queue(const std::string& queue) {
  throw Error(ErrorKind::NotFound, fmt::format("queue {}: no such queue", queue))
      .with_remedy(Remedy::CreateQueue, queue);
}

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

  bool do_create_queue(const std::string& queue, const ConfigChange& change) override {
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

  QueueConfig do_configure(const std::string& queue, const ConfigChange& change) override {
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
    holders_.forget(queue);
    client_.purge("done." + nats::encode_name(queue) + ".*");
    counts.dead_letters = dead_.delete_stream(queue);
    client_.purge(nats::Groups::wait_prefix(queue) + "*");
    client_.purge(nats::RateBudget::key(queue));
    counters_.remove(queue);
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
    // Headers (attributes, ids) travel in the same NATS message as the body,
    // at most 64 KiB of them (JetStream's limit), and the dead-letter copy
    // adds more: attributes get what is left, and a queue whose max size
    // predates the cluster's limit (Capabilities) is held to what fits.
    std::size_t max_payload = static_cast<std::size_t>(natsConnection_GetMaxPayload(client_.nc()));
    std::size_t index = 0;
    for (const auto& m : messages) {
      ++index;
      std::size_t attrs = nats::Publisher::attributes_json(m.attributes).size();
      if (attrs > nats::kMaxAttributesJson)
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: message {}: its attributes take {} bytes as JSON, over "
                                "the {} a NATS cluster carries (JetStream's 64 KiB of headers, "
                                "less q's own); nothing was sent",
                                queue, index, attrs, nats::kMaxAttributesJson));
      if (m.body.size() + nats::kMessageReserve > max_payload)
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: message {} is {} bytes, over what the cluster holds "
                                "(max_payload {} bytes, less {} for q's headers); nothing was "
                                "sent",
                                queue, index, m.body.size(), max_payload, nats::kMessageReserve));
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
    if (!stage_ids_.empty()) publisher.own_ids(stage_ids_);
    auto results = publisher.publish(queue, config, messages);
    if (visible_at > now) {
      std::vector<std::uint64_t> seqs;
      for (const auto& r : results)
        if (!r.duplicate) seqs.push_back(*store::parse_message_id(r.id));
      nats::mark_delayed(client_, queue, seqs, visible_at);
    }
    // A repeat within the dedup window changed nothing but this counter.
    for (const auto& r : results)
      if (r.duplicate)
        counters_.count(queue, nats::counter::kDeduplicated, "dd." + nats::random_token());
    return results;
  }

  // ---- receive and the lease records ------------------------------------------

  std::vector<Message> do_receive(const std::string& queue,
                                  const ReceiveOptions& options) override {
    StoredQueue have = must_load(queue);
    leases_.receiver(
        options.holder_pid != 0 ? options.holder_pid : static_cast<std::uint32_t>(::getpid()),
        options.worker_since);
    // Held (nats_holders.hpp): the holder's record first, so no lease names
    // a holder nobody will ping.
    std::string token = options.holder ? nats::holder_token(*options.holder) : std::string();
    if (!token.empty()) holders_.record(queue, token);
    leases_.holding(token);
    Millis vt = options.visibility_timeout.value_or(have.config.visibility_timeout);
    Millis ack_wait = consumer_ack_wait(have.config);
    std::vector<Message> got;
    std::optional<Error> failure;
    int rounds = 0;
    bool consumer_checked = false;
    auto start = std::chrono::steady_clock::now();
    auto left = [&] {
      return options.wait - std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
    };
    // Paused: nothing is delivered. A long poll looks at the settings record
    // again every 200ms (a resume wakes it within that) until the pause ends.
    while (auto pause = active_pause(have)) {
      if (left() <= 0) return got;
      Millis step = std::min<Millis>(left(), 200);
      if (pause->until != 0) step = std::clamp<Millis>(pause->until - clock_->now(), 1, step);
      std::this_thread::sleep_for(std::chrono::milliseconds(step));
      have = must_load(queue);
    }
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
      // Dead holders' messages are released before the pull finds them;
      // while live ones hold messages, a long poll looks again every
      // kCheckEvery (one of them may die meanwhile).
      bool holders = holders_.check(queue, own_holder_).others;
      Millis wait = left();
      if (holders) wait = std::min<Millis>(wait, nats::HolderBook::kCheckEvery);
      bool held = false;
      auto batch =
          pull(queue, static_cast<int>(want - got.size()), std::max<Millis>(wait, 0), &held);
      if (held && !consumer_checked) {
        // A consumer made before q asked for an unlimited max_ack_pending
        // holds every pull once 1000 are in flight: update it, pull again.
        consumer_checked = true;
        if (consumer_max_ack_pending(queue) != kMaxAckPending) {
          ensure_consumer(queue, have.config, false);
          continue;
        }
      }
      std::size_t passed = 0;
      for (auto& msg : batch) {
        std::optional<Message> m;
        try {
          m = leases_.take(queue, msg.get(), vt, ack_wait, have.config.max_receives);
        } catch (const Error& e) {
          // One message that cannot be taken or moved (its dead-letter copy
          // refused) must not fail the receive of the others: it waits a
          // visibility timeout, and the error is reported only when nothing
          // else was received.
          if (e.kind() == ErrorKind::Busy || e.kind() == ErrorKind::Permission) throw;
          if (!failure) failure = e;
          if (const char* reply = natsMsg_GetReply(msg.get())) leases_.rearm(reply, vt);
          ++passed;
          continue;
        }
        if (m)
          got.push_back(std::move(*m));
        else
          ++passed;
      }
      if (got.size() >= want) break;
      // Deliveries passed over (dead-lettered, still leased and re-armed,
      // acked meanwhile, delayed, their group held) are not the end: look
      // again at once, as a receive on a file goes on to the next message.
      // Each passed delivery is gone or re-armed for later, so this ends.
      if (passed > 0 && ++rounds < 1000) continue;
      if (!got.empty() || wait <= 0) break;
    }
    if (rated) rate_.give_back(queue, have.config.rate, want - got.size());
    if (got.empty() && failure) throw *failure;
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
        // Counted before JetStream hears of it: a receive that finishes this
        // ack (we died first) counts it with the same id, once.
        counters_.count(queue, nats::counter::kAcked,
                        nats::event_id("ak", names_.stream(queue), seq, lease.nonce));
        // Decided: the lease says acked, so no receive hands the message out
        // again (one that gets it finishes this ack). Now tell JetStream; if
        // the cluster does not answer, the ack stands all the same.
        leases_.finish_ack(names_.stream(queue), seq, lease.reply, rev);
        // FIFO: the group's next message, passed over while this one was its
        // head, goes back to JetStream now (nats_groups.hpp).
        if (!lease.group.empty()) groups_.wake(queue, lease.group, clock_->now());
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

  NackResult do_nack(const std::string& queue, const std::string& receipt,
                     const NackOptions& options) override {
    const StoredQueue have = must_load(queue);
    look_again_.erase(queue);  // q work: the released message may be ready now
    auto [seq, lease, revision] = leases_.current(queue, receipt);
    const auto max_receives = have.config.max_receives;
    if (options.dead_letter_when_spent && max_receives != 0 && lease.receives >= max_receives) {
      // The lease's CAS decides, as for any dead letter: no other consumer
      // can have taken it meanwhile.
      leases_.dead_letter(queue, names_.stream(queue), receipt,
                          std::string(utf8_prefix(options.reason, kMaxReason)), options.run);
      return {0, true};
    }
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
    nats::add_attempt(next.history,
                      leases_.ended(lease, AttemptEnd::Released, options.reason, options.run));
    leases_.change(queue, receipt, seq, next, revision);
    counters_.count(queue, nats::counter::kNacked,
                    nats::event_id("nk", names_.stream(queue), seq, lease.nonce));
    leases_.rearm(lease.reply, delay);
    // q work looks again when the released message is visible, not on the
    // next one-second beat (a 300 ms backoff waited a whole second).
    auto [r, fresh] = released_at_.try_emplace(queue, now + delay);
    if (!fresh) r->second = std::min(r->second, now + delay);
    return {now + delay, false};
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

  // ---- peek --------------------------------------------------------------------

  // The oldest messages, sequence by sequence from the stream's first (2.9's
  // stream API reads one message by sequence; acked ones are gaps passed
  // over), each with its state from its lease.
  std::vector<Message> do_peek(const std::string& queue, std::size_t max) override {
    must_load(queue);
    jsStreamState state = stream_state(queue);
    std::vector<Message> out;
    std::string stream = names_.stream(queue);
    Millis now = clock_->now();
    std::uint64_t seen = 0;
    for (std::uint64_t seq = state.FirstSeq;
         state.Msgs > 0 && seq <= state.LastSeq && seen < state.Msgs && out.size() < max; ++seq) {
      auto msg = stored(queue, seq);
      if (!msg) continue;
      ++seen;
      Message m = nats::message_of(msg.get(), seq);
      m.state = MessageState::Visible;
      if (auto r = client_.get(Names::lease_key(queue, seq))) {
        Lease l = Lease::decode(r->value);
        m.receive_count = l.receives;
        m.reason = l.reason;
        if (l.first_received_at) m.first_received_at = l.first_received_at;
        if (l.received_at) m.last_received_at = l.received_at;
        if (l.state == Lease::Acked || l.state == Lease::Dead) continue;  // leaving
        if (l.until > now) {
          m.state = l.state == Lease::Leased ? MessageState::InFlight : MessageState::Delayed;
          m.visible_at = l.until;
        }
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  // ---- dead letters ------------------------------------------------------------

  void do_dead_letter(const std::string& queue, const std::string& receipt,
                      const std::string& reason, const RunReport& run) override {
    must_load(queue);
    leases_.dead_letter(queue, names_.stream(queue), receipt,
                        std::string(utf8_prefix(reason, kMaxReason)), run);
  }

  std::vector<Message> do_dead_letters(const std::string& queue, std::size_t max) override {
    must_load(queue);
    std::vector<Message> out;
    if (max == 0) return out;
    dead_.each(queue, [&](const Message& m, std::uint64_t) {
      out.push_back(m);
      return out.size() < max;
    });
    return out;
  }

  void do_each_dead_letter(const std::string& queue,
                           const std::function<bool(const Message&)>& each) override {
    must_load(queue);
    dead_.each(queue, [&](const Message& m, std::uint64_t) { return each(m); });
  }

  std::uint64_t do_purge_dead_letters(const std::string& queue) override {
    must_load(queue);
    return dead_.purge(queue);
  }

  std::optional<Message> do_find_dead_letter(const std::string& queue,
                                             const std::string& id) override {
    must_load(queue);
    if (auto found = dead_.find(queue, id)) return found->message;
    return std::nullopt;
  }

  std::vector<std::string> do_delete_dead_letters(const std::string& queue,
                                                  const std::vector<std::string>& ids) override {
    must_load(queue);
    std::vector<std::string> missing;
    std::set<std::string> named;  // an id given twice is deleted once
    for (const auto& id : ids) {
      if (!named.insert(id).second) continue;
      auto found = dead_.find(queue, id);
      if (!found || !dead_.remove(queue, found->seq)) missing.push_back(id);
    }
    return missing;
  }

  // Each dead letter moves on its own (JetStream has no transaction over two
  // streams): published to the target first, then removed here, so a move cut
  // short leaves it in both places at worst, and a repeat stores it once.
  std::vector<Message> do_redrive(const std::string& queue,
                                  const RedriveOptions& options) override {
    must_load(queue);
    std::string to = options.to.empty() ? queue : options.to;
    StoredQueue into = to == queue ? must_load(queue) : must_load(to);
    std::vector<nats::DeadLetters::Found> chosen;
    std::size_t max = options.max.value_or(SIZE_MAX);
    if (options.ids.empty()) {
      if (max > 0)
        dead_.each_found(queue, [&](const nats::DeadLetters::Found& f) {
          chosen.push_back(f);
          return chosen.size() < max;
        });
    } else {
      std::set<std::string> named;  // an id given twice moves once
      for (const auto& id : options.ids) {
        if (!named.insert(id).second) continue;
        auto found = dead_.find(queue, id);
        if (!found) {
          if (options.skip_missing) continue;
          throw Error(ErrorKind::NotFound,
                      fmt::format("queue {}: no dead letter {}; nothing was redriven", queue, id));
        }
        if (chosen.size() >= max) break;
        chosen.push_back(std::move(*found));
      }
    }
    if (into.config.fifo) {
      // As on a file: a FIFO queue takes only messages with a group, and each
      // goes back to its place in its group's send order (nats_groups.hpp):
      // moved in that order, so a group's redriven messages line up.
      for (const auto& c : chosen)
        if (c.message.group.empty())
          throw Error(ErrorKind::InvalidData,
                      fmt::format("queue {}: is a FIFO queue and dead letter {} has no group; "
                                  "nothing was redriven",
                                  to, c.message.id));
      for (auto& c : chosen)
        if (c.order == 0) c.order = store::parse_message_id(c.message.id).value_or(0);
      std::stable_sort(chosen.begin(), chosen.end(),
                       [](const auto& a, const auto& b) { return a.order < b.order; });
    }
    std::vector<Message> out;
    for (const auto& c : chosen) {
      check_body_size(to, into.config, c.message.body.size(), "dead letter " + c.message.id,
                      "redriven");
      check_attribute_bytes(to, c.message.attributes);
      out.push_back(c.message);
    }
    if (options.dry_run) return out;
    if (into.config.max_depth != 0) {
      std::uint64_t depth = stream_state(to).Msgs;
      if (depth + chosen.size() > into.config.max_depth)
        throw Error(ErrorKind::Full,
                    fmt::format("queue {}: {} dead letters would not fit under max depth {} ({} "
                                "waiting); nothing was redriven (try --max)",
                                to, chosen.size(), into.config.max_depth, depth));
    }
    // Into its own FIFO queue a message goes back to its place in its group
    // (its redriven subject); into another, to its group's end.
    if (into.config.fifo && to == queue) groups_.ensure_filters(queue);
    for (const auto& c : chosen) {
      std::string subject = !into.config.fifo ? names_.subject(to)
                            : to == queue     ? groups_.redriven_subject(to, c.message.group)
                                              : groups_.subject(to, c.message.group);
      dead_.redrive(queue, c, to, subject, into.config.fifo);
    }
    return out;
  }

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
  Millis do_next_delivery(const std::string& queue, bool rate_limited) override {
    StoredQueue have = must_load(queue);
    jsStreamState state = stream_state(queue);
    if (state.Msgs == 0) return INT64_MAX;
    // A dead holder's messages are ready now; while others hold some, look
    // again within kCheckEvery (nats_holders.hpp).
    auto holders = holders_.check(queue, own_holder_);
    Millis paused_until = 0;
    if (auto pause = active_pause(have)) {
      if (pause->until == 0) return INT64_MAX;
      paused_until = pause->until;
    }
    Millis now = clock_->now();
    Millis next = INT64_MIN;
    if (holders.died) {
      // Released by this check or by the holder's helper: looked for as a
      // message this process released now (JetStream's -NAK may trail).
      auto [r, fresh] = released_at_.try_emplace(queue, now);
      if (!fresh) r->second = std::min(r->second, now);
    }
    if (have.config.fifo || consumer_num_pending(queue) == 0) {
      // FIFO: the heads of free groups; a receive finds them (and passes
      // over the rest), looked for on the same beat.
      constexpr Millis kLookAgain = kSecond;
      // After a message this process released is due, look on a short beat
      // for a while: JetStream's redelivery timer fires on the server, a
      // little after the time q computed.
      constexpr Millis kLookSoon = 50;
      Millis& at = look_again_[queue];
      Millis beat = kLookAgain;
      if (auto r = released_at_.find(queue); r != released_at_.end()) {
        if (r->second - now > kLookAgain) {
          if (at <= now || at > r->second) at = r->second;
        } else if (now < r->second + kLookSoon * 4) {
          // Due within a second, or just due: it is on its way back, so a
          // q work --exit-when-empty must not take the queue for drained
          // (the receive that finds it is a no_wait pull).
          at = now;
          beat = 0;
        } else if (now < r->second + kLookAgain) {
          beat = kLookSoon;
        } else {
          released_at_.erase(r);
        }
      }
      if (beat == 0) {
        // look now
      } else if (now >= at || at - now > beat) {
        at = now + beat;
      } else {
        next = at;
      }
    }
    if (holders.others && next > now + nats::HolderBook::kCheckEvery)
      next = now + nats::HolderBook::kCheckEvery;
    if (rate_limited && have.config.rate > 0 && next != INT64_MAX)
      next = std::max(next, rate_.ready_at(queue, have.config.rate));
    if (next != INT64_MAX) next = std::max(next, paused_until);
    return next;
  }
  std::map<std::string, Millis> look_again_;   // do_next_delivery's beat, per queue
  std::map<std::string, Millis> released_at_;  // when a message this process nacked is due

  // Messages the queue's consumer has not delivered yet.
  std::uint64_t consumer_num_pending(const std::string& queue) {
    std::uint64_t pending = 0;
    jsErrCode code{};
    natsStatus s = client_.retry(
        "reading the consumer of queue " + queue,
        [&](jsErrCode* err) {
          jsConsumerInfo* ci = nullptr;
          natsStatus st = js_GetConsumerInfo(&ci, client_.js(), names_.stream(queue).c_str(),
                                             kConsumer, nullptr, err);
          if (st == NATS_OK) pending = ci->NumPending;
          jsConsumerInfo_Destroy(ci);
          return st;
        },
        &code);
    if (s != NATS_OK) client_.fail("reading the consumer of queue " + queue, s, code);
    return pending;
  }
  // A core NATS subscription to the namespace's publishes and lease
  // records (nats_watch.hpp): a waiting q work is woken by a send.
  std::unique_ptr<ChangeWatch> do_watch() override;

  // Idempotency keys: a record done.<Q>.<sha256 of key> = {until}. Written
  // before the ack (no transaction spans both): a crash between leaves the
  // message to be delivered again and skipped as done, never run twice. As
  // on a file, a stale receipt still records the key (the work was done).
  ReceiptOutcome do_ack_done(const std::string& queue, const std::string& receipt,
                             const std::string& key, Millis keep) override {
    must_load(queue);
    std::string k = done_key(queue, key);
    std::string value = json{{"u", clock_->now() + keep}, {"w", nats::random_token()}}.dump();
    bool written = false;
    for (int attempt = 0; attempt < 5 && !written; ++attempt) {
      auto cur = client_.get(k);
      written = client_.put_if(k, value, cur ? cur->revision : 0).has_value();
    }
    if (!written)
      throw Error(ErrorKind::Busy,
                  fmt::format("queue {}: the record of an idempotency key kept changing; try again",
                              queue));
    auto result = do_ack(queue, {receipt}).at(0);
    if (result.outcome == ReceiptOutcome::Malformed)
      throw Error(ErrorKind::InvalidData, result.detail);
    return result.outcome;
  }

  bool do_is_done(const std::string& queue, const std::string& key) override {
    must_load(queue);
    auto cur = client_.get(done_key(queue, key));
    if (!cur) return false;
    try {
      return json::parse(cur->value).at("u").get<Millis>() > clock_->now();
    } catch (const json::exception& e) {
      throw Error(ErrorKind::Io, fmt::format("queue {}: the record of an idempotency key is "
                                             "damaged ({})",
                                             queue, e.what()));
    }
  }

  static std::string done_key(const std::string& queue, const std::string& key) {
    return "done." + nats::encode_name(queue) + "." + sha256_hex(key);
  }

  // The registry names a q work's command in the attempt history
  // (nats_history.hpp): a record worker.<pid>.<since> while it runs.
  void do_register_worker(std::uint32_t pid, Millis since, const std::string& command) override {
    workers_.add(pid, since, command);
  }
  void do_unregister_worker(std::uint32_t pid, Millis since) override { workers_.drop(pid, since); }

  // A helper process answers for the holder on the cluster (nats_holders.hpp).
  void do_announce_holder(const Holder& holder, bool descendants) override {
    std::string token = holders_.announce(holder, descendants, location_text_);
    if (descendants) own_holder_ = token;
  }

  // q work --to: the outputs first, with ids named after the source delivery,
  // then the ack (nats_stage.hpp says why this is exact without a
  // transaction). A receipt already stale sends nothing; one that goes stale
  // between the publish and the ack leaves the outputs sent (the source's
  // next run publishes them again under the same ids: stored once).
  AckSendResult do_ack_and_send(const std::string& queue, const std::string& receipt,
                                const std::string& to, std::vector<OutgoingMessage> messages,
                                const SendOptions& options) override {
    StoredQueue have = must_load(queue);
    AckSendResult result;
    std::uint64_t seq = 0;
    try {
      seq = leases_.current(queue, receipt).seq;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Stale && e.kind() != ErrorKind::InvalidData) throw;
      result.outcome =
          e.kind() == ErrorKind::Stale ? ReceiptOutcome::Stale : ReceiptOutcome::Malformed;
      result.detail = e.what();
      return result;
    }
    if (!messages.empty()) {
      SendOptions send = options;
      send.create_queue = false;
      stage_ids_ = nats::stage_id_prefix(names_.stream(queue), have.created_at, seq);
      try {
        result.sent = do_send(to, std::move(messages), send);
      } catch (...) {
        stage_ids_.clear();
        throw;
      }
      stage_ids_.clear();
    }
    nats::kill_point("stage-sent");
    auto acked = do_ack(queue, {receipt}).at(0);
    result.outcome = acked.outcome;
    result.detail = acked.detail;
    return result;
  }

  // Export and import: nats_transfer.hpp.
  void do_export_messages(const std::string& queue,
                          const std::function<void(const Message&)>& each) override {
    StoredQueue have = must_load(queue);
    transfer_.export_queue(queue, have.config, each);
  }
  std::vector<std::string> do_import_messages(const std::string& queue,
                                              std::vector<Message> messages, bool create_queue,
                                              bool skip_existing) override {
    if (create_queue && !load(queue)) {
      check_new_queue_name(queue);
      do_create_queue(queue, {});
    }
    StoredQueue have = must_load(queue);
    return transfer_.import(queue, have.config, std::move(messages), skip_existing);
  }
  // A pause lives in the queue's settings record (one CAS), where every
  // receive already looks.
  void do_pause(const std::string& queue, Millis until, const std::string& reason) override {
    for (int attempt = 0; attempt < 5; ++attempt) {
      StoredQueue have = must_load(queue);
      Millis now = clock_->now();
      if (until != 0 && until <= now)
        throw Error(ErrorKind::Usage, "--for: the pause must end in the future");
      if (client_.put_if(
              Names::config_key(queue),
              nats::encode_config(have.config, have.created_at, Pause{now, until, reason}),
              have.revision))
        return;
    }
    busy_settings(queue, "pause");
  }

  std::optional<Pause> do_resume(const std::string& queue) override {
    for (int attempt = 0; attempt < 5; ++attempt) {
      StoredQueue have = must_load(queue);
      if (!have.pause) return std::nullopt;
      auto was = active_pause(have);
      if (client_.put_if(Names::config_key(queue),
                         nats::encode_config(have.config, have.created_at), have.revision))
        return was;
    }
    busy_settings(queue, "resume");
  }
  // One message by id with its attempt history: live (the stream's message
  // at the id's sequence, its state and history from its lease), else a dead
  // letter (history in its Q-History header). A redriven message keeps its
  // id but has a new sequence: found by walking the stream for its Q-Id.
  std::optional<Message> do_show(const std::string& queue, const std::string& id) override {
    must_load(queue);
    auto seq = store::parse_message_id(id);
    std::optional<Message> live;
    if (seq)
      if (auto msg = stored(queue, *seq)) {
        Message m = nats::message_of(msg.get(), *seq);
        if (m.id == id) live = live_state(queue, *seq, std::move(m));
      }
    if (!live) {
      jsStreamState state = stream_state(queue);
      std::uint64_t seen = 0;
      for (std::uint64_t s = state.FirstSeq;
           !live && state.Msgs > 0 && s <= state.LastSeq && seen < state.Msgs; ++s) {
        auto msg = stored(queue, s);
        if (!msg) continue;
        ++seen;
        if (nats::header(msg.get(), "Q-Id") == id)
          live = live_state(queue, s, nats::message_of(msg.get(), s));
      }
    }
    if (live) {
      if (live->state == MessageState::Dead) return std::nullopt;  // acked or moving
      return live;
    }
    if (auto found = dead_.find(queue, id)) return found->message;
    return std::nullopt;
  }

  // A live message's state, receive count, times and attempts from its lease.
  // Acked (or moving to the dead letters): reported Dead for the caller to drop.
  Message live_state(const std::string& queue, std::uint64_t seq, Message m) {
    m.state = MessageState::Visible;
    auto r = client_.get(Names::lease_key(queue, seq));
    if (!r) return m;
    Lease l = Lease::decode(r->value);
    if (l.state == Lease::Acked || l.state == Lease::Dead) {
      m.state = MessageState::Dead;
      return m;
    }
    m.receive_count = l.receives;
    m.reason = l.reason;
    if (l.first_received_at) m.first_received_at = l.first_received_at;
    if (l.received_at) m.last_received_at = l.received_at;
    Millis now = clock_->now();
    if (l.until > now) {
      m.state = l.state == Lease::Leased ? MessageState::InFlight : MessageState::Delayed;
      m.visible_at = l.until;
    }
    m.attempts = l.history;
    if (l.state == Lease::Leased && l.receives > 0) {
      Attempt open = leases_.ended(l, AttemptEnd::Open);
      open.ended_at = 0;
      m.attempts.push_back(std::move(open));
    }
    return m;
  }
  // A queue file holding every queue of the namespace (nats_backup.hpp).
  void do_backup(const std::string& path) override;
  // The cluster's max_payload (from the server's INFO) less what q adds to a
  // body (nats_send.hpp): a max size that fits is sent, received and
  // dead-lettered whole; a larger one is refused when it is set.
  Capabilities do_capabilities() override {
    std::int64_t max_payload = natsConnection_GetMaxPayload(client_.nc());
    Capabilities can;
    can.max_size = nats::max_size_for(max_payload);
    can.max_size_source = fmt::format(
        "the cluster's max_payload is {} bytes, of which q keeps {} for its headers (attributes "
        "and the dead-letter copy's among them); raise max_payload in the servers' configuration "
        "(README: On a NATS JetStream cluster)",
        max_payload, nats::kMessageReserve);
    return can;
  }
  std::vector<std::string> do_verify() override {
    return nats::verify_namespace(client_, names_, dead_);
  }

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
  // outputs (nats_stage.hpp), for the do_send it calls.
  std::string stage_ids_;
  nats::Counters counters_{client_, names_, replicas_};
  nats::Workers workers_{client_};
  nats::Transfer transfer_{client_, names_, *clock_, dead_};

  std::optional<StoredQueue> load(const std::string& queue) {
    auto r = client_.get(Names::config_key(queue));
    if (!r) return std::nullopt;
    return nats::parse_config(queue, *r);
  }
  // The pause in force now, if any (one that has ended is as good as none).
  std::optional<Pause> active_pause(const StoredQueue& have) const {
    if (have.pause && (have.pause->until == 0 || have.pause->until > clock_->now()))
      return have.pause;
    return std::nullopt;
  }
  [[noreturn]] static void busy_settings(const std::string& queue, const char* what) {
    throw Error(
        ErrorKind::Busy,
        fmt::format("queue {}: its settings kept changing under this {}; try again", queue, what));
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
    // A FIFO queue: two subjects per message group (nats_groups.hpp).
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

  void ensure_consumer(const std::string& queue, const QueueConfig& c, bool create) {
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

  // The max_ack_pending the queue's consumer has; 0 when it cannot be read.
  std::int64_t consumer_max_ack_pending(const std::string& queue) {
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

  // Message `seq` of the queue's stream; nullptr when it is not there.
  nats::MsgPtr stored(const std::string& queue, std::uint64_t seq) {
    natsMsg* raw = nullptr;
    jsErrCode code{};
    natsStatus s = client_.retry(
        "reading queue " + queue,
        [&](jsErrCode* err) {
          natsMsg_Destroy(raw);
          raw = nullptr;
          return js_GetMsg(&raw, client_.js(), names_.stream(queue).c_str(), seq, nullptr, err);
        },
        &code);
    nats::MsgPtr msg(raw);
    if (s == NATS_NOT_FOUND || code == static_cast<jsErrCode>(10037)) return nullptr;
    if (s != NATS_OK) client_.fail("reading queue " + queue, s, code);
    return msg;
  }

  jsStreamState stream_state(const std::string& queue) {
    std::string what = "reading queue " + queue;
    auto state = client_.stream_state(names_.stream(queue), what);
    if (!state) client_.fail(what, NATS_NOT_FOUND, kStreamNotFound);
    return *state;
  }

  // One pull request to the queue's consumer, by hand rather than through
  // natsSubscription_Fetch: `no_wait` answers at once when nothing is there,
  // and with `expires` the consumer's leader holds the request until a
  // message arrives (a send wakes it at once) or the wait is over; either way
  // it ends the request as soon as it delivered what it had (2.9 semantics).
  // `held` (when given) says whether the consumer's leader kept the request
  // without an answer, as it does with a no_wait request at the consumer's
  // max_ack_pending.
  std::vector<MsgPtr> pull(const std::string& queue, int batch, Millis wait, bool* held = nullptr) {
    std::vector<MsgPtr> out;
    if (held) *held = false;
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
      if (s == NATS_TIMEOUT) {
        if (held && out.empty()) *held = true;
        break;
      }
      if (s != NATS_OK) client_.fail("receiving from queue " + queue, s, {});
      // A status (404 no messages, 408 request over, 409 ...) ends the request.
      if (!nats::header(msg.get(), "Status").empty()) break;
      out.push_back(std::move(msg));
    }
    return out;
  }

  // `next`, when given, gets the earliest time a leased or delayed message is
  // visible again.
  QueueStats stats_of(const std::string& queue, const StoredQueue& have, Millis* next = nullptr) {
    QueueStats st;
    st.name = queue;
    st.config = have.config;
    st.created_at = have.created_at;
    jsStreamState state = stream_state(queue);
    Millis now = clock_->now();
    std::uint64_t in_flight = 0, delayed = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> leftovers;  // seq, revision
    client_.each(Names::lease_prefix(queue) + "*", [&](const std::string& key, const Record& r) {
      // Messages leave a work-queue stream by ack (their lease goes with
      // them), purge (leases too) or age, oldest first: a lease below the
      // first sequence outlived its message (MaxAge) and counts for nothing.
      std::uint64_t seq = std::stoull(key.substr(key.rfind('.') + 1));
      if (state.Msgs == 0 || seq < state.FirstSeq) return;
      Lease l = Lease::decode(r.value);
      if (l.state == Lease::Acked || l.state == Lease::Dead) leftovers.push_back({seq, r.revision});
      if (next && (l.state == Lease::Leased || l.state == Lease::Released) && l.until > now)
        *next = std::min(*next, l.until);
      if (l.state == Lease::Acked || l.state == Lease::Dead ||
          (l.state == Lease::Leased && l.until > now))
        ++in_flight;
      else if (l.state == Lease::Released && l.until > now)
        ++delayed;
    });
    // An ack or a dead-letter move under way, or the leftover of one killed
    // after its message left the stream (issue 25): that one counts for
    // nothing and is removed, as its process would have.
    for (const auto& [seq, revision] : leftovers) {
      if (stored(queue, seq)) continue;
      client_.remove(revision);
      --in_flight;
    }
    // A work-queue stream holds exactly the messages not yet acked.
    st.in_flight = std::min<std::uint64_t>(in_flight, state.Msgs);
    st.delayed = std::min<std::uint64_t>(delayed, state.Msgs - st.in_flight);
    st.visible = state.Msgs - st.in_flight - st.delayed;
    if (state.Msgs > 0) st.oldest_age = std::max<Millis>(0, now - state.FirstTime / kNs);
    st.counters = counters_.read(queue, state.LastSeq);
    st.dead = dead_.count(queue);
    st.pause = active_pause(have);
    if (have.config.fifo) {
      // Groups with messages: the group subjects in the stream. Only heads
      // are leased, so the messages in flight are the held groups.
      st.groups = groups_.count(queue, static_cast<std::uint64_t>(state.NumSubjects));
      st.held_groups = st.in_flight;
    }
    return st;
  }
};

std::unique_ptr<ChangeWatch> NatsBroker::do_watch() { return nats::watch(client_, names_.ns); }

void NatsBroker::do_backup(const std::string& path) {
  if (path.rfind("nats://", 0) == 0)
    throw Error(ErrorKind::Usage,
                fmt::format("{}: a backup is a queue file; to copy queues onto a cluster, 'q -f "
                            "FILE export QUEUE | q import QUEUE --create'",
                            path));
  nats::backup_to_file(path, *clock_, do_list_queues(), [&](const std::string& queue) {
    nats::BackupQueue b;
    auto have = load(queue);
    if (!have) return std::optional<nats::BackupQueue>{};  // deleted meanwhile
    b.config = have->config;
    b.pause = active_pause(*have);
    transfer_.export_queue(queue, have->config, [&](const Message& m) { b.messages.push_back(m); });
    return std::optional<nats::BackupQueue>(std::move(b));
  });
}

}  // namespace

std::unique_ptr<Broker> open_nats_broker(const NatsOpenOptions& options) {
  return std::make_unique<NatsBroker>(nats::parse_location(options.location), options.credentials,
                                      options.timeout, options.clock, options.location);
}

}  // namespace q
