// NatsBroker: what a queue holds, read without changing it (stats, peek,
// dead letters, show, capabilities, verify), the watch and the backup.
#include "libq/nats/broker_impl.hpp"

namespace q::nats {

std::vector<QueueStats> NatsBroker::do_stats(const std::string& queue) {
  std::vector<QueueStats> out;
  if (!queue.empty()) {
    out.push_back(stats_of(queue, must_load(queue)));
    return out;
  }
  for (const auto& name : do_list_queues())
    if (auto have = load(name)) out.push_back(stats_of(name, *have));
  return out;
}

std::uint64_t NatsBroker::do_purge(const std::string& queue) {
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

std::vector<Message> NatsBroker::do_peek(const std::string& queue, std::size_t max) {
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

void NatsBroker::do_dead_letter(const std::string& queue, const std::string& receipt,
                                const std::string& reason, const RunReport& run) {
  must_load(queue);
  leases_.dead_letter(queue, names_.stream(queue), receipt,
                      std::string(utf8_prefix(reason, kMaxReason)), run);
}

std::vector<Message> NatsBroker::do_dead_letters(const std::string& queue, std::size_t max) {
  must_load(queue);
  std::vector<Message> out;
  if (max == 0) return out;
  dead_.each(queue, [&](const Message& m, std::uint64_t) {
    out.push_back(m);
    return out.size() < max;
  });
  return out;
}

void NatsBroker::do_each_dead_letter(const std::string& queue,
                                     const std::function<bool(const Message&)>& each) {
  must_load(queue);
  dead_.each(queue, [&](const Message& m, std::uint64_t) { return each(m); });
}

std::uint64_t NatsBroker::do_purge_dead_letters(const std::string& queue) {
  must_load(queue);
  return dead_.purge(queue);
}

std::optional<Message> NatsBroker::do_find_dead_letter(const std::string& queue,
                                                       const std::string& id) {
  must_load(queue);
  if (auto found = dead_.find(queue, id)) return found->message;
  return std::nullopt;
}

std::vector<std::string> NatsBroker::do_delete_dead_letters(const std::string& queue,
                                                            const std::vector<std::string>& ids) {
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

std::vector<Message> NatsBroker::do_redrive(const std::string& queue,
                                            const RedriveOptions& options) {
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
    // goes back to its place in its group's send order (nats/groups.hpp):
    // moved in that order, so a group's redriven messages line up.
    for (const auto& c : chosen)
      if (c.message.group.empty())
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: is a FIFO queue and dead letter {} has no group; "
                                "nothing was redriven",
                                to, c.message.id));
    for (auto& c : chosen)
      if (c.order == 0) c.order = q::parse_message_id(c.message.id).value_or(0);
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

std::optional<Message> NatsBroker::do_show(const std::string& queue, const std::string& id) {
  must_load(queue);
  auto seq = q::parse_message_id(id);
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

Message NatsBroker::live_state(const std::string& queue, std::uint64_t seq, Message m) {
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

Capabilities NatsBroker::do_capabilities() {
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

std::vector<std::string> NatsBroker::do_verify() {
  return nats::verify_namespace(client_, names_, dead_);
}

std::optional<QueueConfig> NatsBroker::do_queue_config(const std::string& queue) {
  auto have = load(queue);
  if (!have) return std::nullopt;
  return have->config;
}

QueueStats NatsBroker::stats_of(const std::string& queue, const StoredQueue& have, Millis* next) {
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

}  // namespace q::nats
