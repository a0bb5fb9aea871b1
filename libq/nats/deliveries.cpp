// NatsBroker: send, receive, ack, extend and nack on the lease records, and
// what q work needs (the next delivery, done keys, workers, holders, stages).
#include "libq/nats/broker_impl.hpp"
#include "libq/nats/pipeline.hpp"

namespace q::nats {

std::vector<SendResult> NatsBroker::do_send(const std::string& queue,
                                            std::vector<OutgoingMessage> messages,
                                            const SendOptions& options) {
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
  auto full = [&](std::uint64_t depth) {
    return Error(ErrorKind::Full,
                 fmt::format("queue {}: full ({} of max depth {} messages); {} more would not "
                             "fit, nothing was sent",
                             queue, depth, config.max_depth, messages.size()));
  };
  // A batch is checked first, so that one that cannot fit sends nothing. One
  // message needs no look first (a round trip): the stream's MaxMsgs with
  // DiscardNew refuses it atomically (ensure_stream), and the depth is read
  // only then, for the same words.
  const bool one = messages.size() == 1;
  if (config.max_depth != 0 && !one) {
    std::uint64_t depth = stream_state(queue).Msgs;
    if (depth + messages.size() > config.max_depth) throw full(depth);
  }
  nats::Publisher publisher(client_, names_, *clock_);
  if (visible_at > now) publisher.visible_at(visible_at);
  if (!stage_ids_.empty()) publisher.own_ids(stage_ids_);
  std::vector<SendResult> results;
  try {
    results = publisher.publish(queue, config, messages);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Full || !one) throw;
    throw full(stream_state(queue).Msgs);
  }
  if (visible_at > now) {
    std::vector<std::uint64_t> seqs;
    for (const auto& r : results)
      if (!r.duplicate) seqs.push_back(*q::parse_message_id(r.id));
    nats::mark_delayed(client_, queue, seqs, visible_at);
  }
  // A repeat within the dedup window changed nothing but this counter.
  for (const auto& r : results)
    if (r.duplicate)
      counters_.count(queue, nats::counter::kDeduplicated, "dd." + nats::random_token());
  return results;
}

std::vector<Message> NatsBroker::do_receive(const std::string& queue,
                                            const ReceiveOptions& options) {
  StoredQueue have = must_load(queue);
  leases_.receiver(
      options.holder_pid != 0 ? options.holder_pid : static_cast<std::uint32_t>(::getpid()),
      options.worker_since);
  // Held (nats/holders.hpp): the holder's record first, so no lease names
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
  // The queue's shared rate (nats/rate.hpp): starts are taken before the
  // pull, and those not used given back after it.
  std::uint64_t want = options.max_messages;
  const bool rated = options.rate_limited && have.config.rate > 0;
  if (rated) {
    while ((want = rate_.take(queue, have.config.rate, options.max_messages)) == 0) {
      Millis until = rate_.ready_at(queue, have.config.rate) - clock_->now();
      if (left() <= 0) return got;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<Millis>(until, 1, left())));
    }
  }
  // The takes' counts go together when the receive ends (after every
  // decision they count; an end by an error publishes them too).
  std::vector<nats::Counters::Event> counts;
  leases_.defer_counts(&counts);
  struct CountAtEnd {
    nats::LeaseBook& leases;
    const std::string& queue;
    ~CountAtEnd() {
      try {
        leases.count_deferred(queue);
      } catch (...) {  // decided already: only the counts are lost (Counters::count)
      }
    }
  } count_at_end{leases_, queue};
  for (;;) {
    // Dead holders' messages are released before the pull finds them;
    // while live ones hold messages, a long poll looks again every
    // kCheckEvery (one of them may die meanwhile).
    bool holders = holders_.check(queue, own_holder_).others;
    Millis wait = left();
    if (holders) wait = std::min<Millis>(wait, nats::HolderBook::kCheckEvery);
    bool held = false;
    auto batch = pull(queue, static_cast<int>(want - got.size()), std::max<Millis>(wait, 0), &held);
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
    // A batch's first deliveries are taken together by CAS on "no lease
    // yet" (exact, nothing to read first); the others' lease records are
    // read together, then each is taken by take().
    std::vector<std::optional<nats::Record>> leases(batch.size());
    std::vector<bool> read(batch.size(), false);
    std::vector<std::optional<Message>> first;
    std::vector<bool> taken(batch.size(), false);
    if (batch.size() > 1) {
      std::vector<natsMsg*> msgs;
      for (auto& msg : batch) msgs.push_back(msg.get());
      first = leases_.take_first_deliveries(queue, msgs, vt, ack_wait, taken);
      std::vector<std::string> keys;
      std::vector<std::size_t> of;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (taken[i]) continue;
        jsMsgMetaData* meta = nullptr;
        if (natsMsg_GetMetaData(&meta, batch[i].get()) == NATS_OK) {
          keys.push_back(nats::Names::lease_key(queue, meta->Sequence.Stream));
          of.push_back(i);
        }
        jsMsgMetaData_Destroy(meta);
      }
      if (keys.size() > 1) {
        try {
          auto records = nats::get_together(client_, keys);
          for (std::size_t k = 0; k < of.size(); ++k) {
            leases[of[k]] = std::move(records[k]);
            read[of[k]] = true;
          }
        } catch (const Error& e) {
          // Each take() reads its own then, and fails (or not) on its own.
          if (e.kind() == ErrorKind::Busy || e.kind() == ErrorKind::Permission) throw;
        }
      }
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& msg = batch[i];
      std::optional<Message> m;
      try {
        if (taken[i])
          m = std::move(first[i]);
        else
          m = leases_.take(queue, msg.get(), vt, ack_wait, have.config.max_receives,
                           read[i] ? &leases[i] : nullptr);
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

std::vector<ReceiptResult> NatsBroker::do_ack(const std::string& queue,
                                              const std::vector<std::string>& receipts) {
  must_load(queue);
  const std::string stream = names_.stream(queue);
  std::vector<ReceiptResult> results;
  std::map<std::string, std::size_t> first;
  // Called in a catch block: an error other than a stale or malformed
  // receipt goes on up.
  auto settle = [&](std::size_t at, const Error& e) {
    if (e.kind() != ErrorKind::Stale && e.kind() != ErrorKind::InvalidData) throw;
    results[at].outcome =
        e.kind() == ErrorKind::Stale ? ReceiptOutcome::Stale : ReceiptOutcome::Malformed;
    results[at].detail = e.what();
  };
  // Each step for every receipt together (nats/pipeline.hpp), in the order
  // one ack takes them: read the lease, CAS it to acked, count, +ACK, and
  // remove the lease once the message is gone.
  struct Acking {
    std::size_t at;  // in results
    std::uint64_t seq;
    nats::LeaseBook::Current current;
    std::uint64_t revision = 0;  // of the acked lease
  };
  std::vector<Acking> acking;
  std::vector<std::string> keys;
  std::vector<std::size_t> parsed;
  for (const auto& receipt : receipts) {
    results.push_back({receipt, ReceiptOutcome::Done, {}});
    if (auto seen = first.find(receipt); seen != first.end()) continue;
    first.emplace(receipt, results.size() - 1);
    try {
      keys.push_back(nats::Names::lease_key(queue, nats::LeaseBook::receipt_seq(receipt)));
      parsed.push_back(results.size() - 1);
    } catch (const Error& e) {
      settle(results.size() - 1, e);
    }
  }
  auto leases = keys.size() > 1 ? nats::get_together(client_, keys)
                                : std::vector<std::optional<nats::Record>>();
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    const std::string& receipt = results[parsed[i]].receipt;
    try {
      auto current = leases.empty() ? leases_.current(queue, receipt)
                                    : leases_.current(receipt, std::move(leases[i]), queue);
      acking.push_back({parsed[i], current.seq, std::move(current)});
    } catch (const Error& e) {
      settle(parsed[i], e);
    }
  }
  // Decided: the lease says acked, so no receive hands the message out
  // again (one that gets it finishes this ack).
  std::vector<nats::Write> writes;
  for (const auto& a : acking) {
    nats::Lease acked = a.current.lease;
    acked.state = nats::Lease::Acked;
    writes.push_back({nats::Names::lease_key(queue, a.seq), acked.encode(), a.current.revision});
  }
  // One receipt's failure (the cluster stopped answering) does not stop the
  // others decided here from being counted and finished; it is thrown after.
  std::exception_ptr failure;
  std::vector<std::exception_ptr> errors(writes.size());
  auto written = writes.size() > 1
                     ? nats::put_if_together(client_, writes, nats::Client::OnClaim::Wait, &errors)
                     : std::vector<std::optional<std::uint64_t>>(writes.size());
  std::vector<Acking> decided;
  for (std::size_t i = 0; i < acking.size(); ++i) {
    auto& a = acking[i];
    try {
      if (errors[i]) std::rethrow_exception(errors[i]);
      if (written[i]) {
        a.revision = *written[i];
      } else {
        // Another write came first (or one receipt alone): read again.
        nats::Lease acked = a.current.lease;
        acked.state = nats::Lease::Acked;
        a.revision = leases_.change(queue, results[a.at].receipt, a.seq, acked, a.current.revision);
      }
      decided.push_back(std::move(a));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Stale || e.kind() == ErrorKind::InvalidData)
        settle(a.at, e);
      else if (!failure)
        failure = std::current_exception();
    }
  }
  // Counted before JetStream hears of it: a receive that finishes this ack
  // (we died first) counts it with the same id, once.
  std::vector<nats::Counters::Event> events;
  for (const auto& a : decided)
    events.push_back(
        {nats::counter::kAcked, nats::event_id("ak", stream, a.seq, a.current.lease.nonce)});
  if (!events.empty()) counters_.count_together(queue, events);
  // A stale ack decides nothing; each attempt counts (a random id), and a
  // cluster that fails that count loses the count, not the answer.
  std::vector<nats::Counters::Event> stale;
  for (std::size_t i = 0; i < results.size(); ++i)
    if (results[i].outcome == ReceiptOutcome::Stale && first.at(results[i].receipt) == i)
      stale.push_back({nats::counter::kStaleAcks, "sa." + nats::random_token()});
  if (!stale.empty()) {
    try {
      counters_.count_together(queue, stale);
    } catch (const Error&) {
    }
  }
  // Now tell JetStream; if the cluster does not answer, the acks stand all the same.
  std::vector<nats::LeaseBook::Finish> finishing;
  for (const auto& a : decided) finishing.push_back({a.seq, a.current.lease.reply, a.revision});
  if (!finishing.empty()) leases_.finish_acks(stream, finishing);
  // FIFO: the group's next message, passed over while this one was its
  // head, goes back to JetStream now (nats/groups.hpp).
  for (const auto& a : decided)
    if (!a.current.lease.group.empty()) groups_.wake(queue, a.current.lease.group, clock_->now());
  if (failure) std::rethrow_exception(failure);
  // A receipt given twice has its first one's answer.
  for (std::size_t i = 0; i < results.size(); ++i)
    if (auto f = first.find(results[i].receipt); f != first.end() && f->second != i)
      results[i] = results[f->second];
  return results;
}

Millis NatsBroker::do_extend(const std::string& queue, const std::string& receipt, Millis by) {
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

NackResult NatsBroker::do_nack(const std::string& queue, const std::string& receipt,
                               const NackOptions& options) {
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

Millis NatsBroker::do_next_delivery(const std::string& queue, bool rate_limited) {
  StoredQueue have = must_load(queue);
  jsStreamState state = stream_state(queue);
  if (state.Msgs == 0) return INT64_MAX;
  // A dead holder's messages are ready now; while others hold some, look
  // again within kCheckEvery (nats/holders.hpp).
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
std::uint64_t NatsBroker::consumer_num_pending(const std::string& queue) {
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

ReceiptOutcome NatsBroker::do_ack_done(const std::string& queue, const std::string& receipt,
                                       const std::string& key, Millis keep) {
  must_load(queue);
  std::string k = done_key(queue, key);
  std::string value = json{{"u", clock_->now() + keep}, {"w", nats::random_token()}}.dump();
  bool written = false;
  for (int attempt = 0; attempt < 5 && !written; ++attempt) {
    auto cur = client_.get(k);
    written = client_.put_if(k, value, cur ? cur->revision : 0).has_value();
  }
  if (!written)
    throw Error(
        ErrorKind::Busy,
        fmt::format("queue {}: the record of an idempotency key kept changing; try again", queue));
  auto result = do_ack(queue, {receipt}).at(0);
  if (result.outcome == ReceiptOutcome::Malformed)
    throw Error(ErrorKind::InvalidData, result.detail);
  return result.outcome;
}

bool NatsBroker::do_is_done(const std::string& queue, const std::string& key) {
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

std::string NatsBroker::done_key(const std::string& queue, const std::string& key) {
  return "done." + nats::encode_name(queue) + "." + sha256_hex(key);
}

void NatsBroker::do_register_worker(std::uint32_t pid, Millis since, const std::string& command) {
  workers_.add(pid, since, command);
}

void NatsBroker::do_announce_holder(const Holder& holder, bool descendants) {
  std::string token = holders_.announce(holder, descendants, location_text_);
  if (descendants) own_holder_ = token;
}

AckSendResult NatsBroker::do_ack_and_send(const std::string& queue, const std::string& receipt,
                                          const std::string& to,
                                          std::vector<OutgoingMessage> messages,
                                          const SendOptions& options) {
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
    if (result.outcome == ReceiptOutcome::Stale) {
      try {  // the count is lost, not the answer
        counters_.count(queue, nats::counter::kStaleAcks, "sa." + nats::random_token());
      } catch (const Error&) {
      }
    }
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

void NatsBroker::do_export_messages(const std::string& queue,
                                    const std::function<void(const Message&)>& each) {
  StoredQueue have = must_load(queue);
  transfer_.export_queue(queue, have.config, each);
}

std::vector<std::string> NatsBroker::do_import_messages(const std::string& queue,
                                                        std::vector<Message> messages,
                                                        bool create_queue, bool skip_existing) {
  if (create_queue && !load(queue)) {
    check_new_queue_name(queue);
    do_create_queue(queue, {});
  }
  StoredQueue have = must_load(queue);
  return transfer_.import(queue, have.config, std::move(messages), skip_existing);
}

std::vector<MsgPtr> NatsBroker::pull(const std::string& queue, int batch, Millis wait, bool* held) {
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

}  // namespace q::nats
