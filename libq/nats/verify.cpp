#include "libq/nats/verify.hpp"

#include <map>
#include <set>

#include <fmt/format.h>

#include "libq/ids.hpp"

namespace q::nats {
namespace {
constexpr jsErrCode kConsumerNotFound = static_cast<jsErrCode>(10014);

struct QueueInfo {
  bool stream = false;  // its stream exists
  std::uint64_t first_seq = 0, last_seq = 0;
};

class Verifier {
 public:
  Verifier(Client& client, const Names& names, DeadLetters& dead)
      : client_(client), names_(names), dead_(dead) {}

  std::vector<std::string> run() {
    settings();
    streams();
    for (auto& [queue, info] : queues_) {
      if (!info.stream) continue;
      consumer(queue);
      messages(queue, info);
      dead_letters(queue);
    }
    records();
    return problems_;
  }

 private:
  Client& client_;
  const Names& names_;
  DeadLetters& dead_;
  std::map<std::string, QueueInfo> queues_;
  std::vector<std::string> problems_;

  void problem(std::string line) { problems_.push_back(std::move(line)); }

  void settings() {
    client_.each("config.*", [&](const std::string& key, const Record& r) {
      auto name = decode_name(key.substr(key.find('.') + 1));
      if (!name) {
        problem(
            fmt::format("record {}: not the settings of a queue (its name does not decode)", key));
        return;
      }
      try {
        parse_config(*name, r);
      } catch (const Error& e) {
        problem(fmt::format("queue {}: settings record damaged: {}", *name, e.what()));
      }
      queues_[*name];
    });
  }

  void streams() {
    jsStreamNamesList* list = nullptr;
    jsErrCode code{};
    natsStatus s = client_.retry(
        "listing the streams",
        [&](jsErrCode* err) {
          jsStreamNamesList_Destroy(list);
          list = nullptr;
          return js_StreamNames(&list, client_.js(), nullptr, err);
        },
        &code);
    std::unique_ptr<jsStreamNamesList, Deleter<jsStreamNamesList, jsStreamNamesList_Destroy>> hold(
        list);
    if (s == NATS_NOT_FOUND) return;
    if (s != NATS_OK) client_.fail("listing the streams", s, code);
    const std::string live = "Q_" + names_.ns + "_", dead = "QD_" + names_.ns + "_";
    std::set<std::string> dead_streams;
    for (int i = 0; list && i < list->Count; ++i) {
      std::string stream = list->List[i];
      bool is_dead = stream.rfind(dead, 0) == 0;
      if (!is_dead && stream.rfind(live, 0) != 0) continue;
      auto name = decode_name(stream.substr(is_dead ? dead.size() : live.size()));
      if (!name || !queues_.count(*name)) {
        problem(fmt::format(
            "stream {}: {} of no queue (no settings record{}): a leftover of a "
            "create or delete cut short",
            stream, is_dead ? "the dead letters" : "the messages", name ? " for " + *name : ""));
        continue;
      }
      if (is_dead) continue;
      auto& info = queues_[*name];
      info.stream = true;
    }
    for (auto& [queue, info] : queues_) {
      if (!info.stream) {
        problem(
            fmt::format("queue {}: settings record without its stream {} (its messages are "
                        "gone; delete the queue and create it again)",
                        queue, names_.stream(queue)));
        continue;
      }
      jsStreamInfo* si = nullptr;
      s = client_.retry(
          "reading queue " + queue,
          [&](jsErrCode* err) {
            jsStreamInfo_Destroy(si);
            si = nullptr;
            return js_GetStreamInfo(&si, client_.js(), names_.stream(queue).c_str(), nullptr, err);
          },
          &code);
      StreamInfoPtr hold_si(si);
      if (s != NATS_OK && code == kStreamNotFound) {
        info.stream = false;  // deleted meanwhile
        continue;
      }
      if (s != NATS_OK) client_.fail("reading queue " + queue, s, code);
      info.first_seq = si->State.FirstSeq;
      info.last_seq = si->State.LastSeq;
    }
  }

  void consumer(const std::string& queue) {
    jsConsumerInfo* ci = nullptr;
    jsErrCode code{};
    natsStatus s = client_.retry(
        "reading the consumer of queue " + queue,
        [&](jsErrCode* err) {
          jsConsumerInfo_Destroy(ci);
          ci = nullptr;
          return js_GetConsumerInfo(&ci, client_.js(), names_.stream(queue).c_str(), "q", nullptr,
                                    err);
        },
        &code);
    ConsumerInfoPtr hold(ci);
    if (s == NATS_OK) return;
    if (s == NATS_NOT_FOUND || code == kConsumerNotFound)
      problem(
          fmt::format("queue {}: its stream {} has no consumer 'q' (nothing can be "
                      "received; 'q config {}' with any setting makes it again)",
                      queue, names_.stream(queue), queue));
    else if (code != kStreamNotFound)
      client_.fail("reading the consumer of queue " + queue, s, code);
  }

  MsgPtr stored(const std::string& stream, std::uint64_t seq) {
    return client_.stored_message(stream, seq, "reading stream " + stream, true);
  }

  // Every message's headers read as a q message.
  void messages(const std::string& queue, const QueueInfo& info) {
    std::string stream = names_.stream(queue);
    for (std::uint64_t seq = info.first_seq; info.last_seq > 0 && seq <= info.last_seq; ++seq) {
      auto msg = stored(stream, seq);
      if (!msg) continue;
      try {
        message_of(msg.get(), seq);
      } catch (const Error& e) {
        problem(fmt::format("queue {}: {}", queue, e.what()));
      }
    }
  }

  void dead_letters(const std::string& queue) {
    try {
      dead_.each(queue, [](const Message&, std::uint64_t) { return true; });
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Io) throw;
      problem(fmt::format("queue {}: dead letter: {}", queue, e.what()));
    }
  }

  // Lease records (and the other records kept per queue) against the queues
  // and the messages they name.
  void records() {
    struct Suspect {
      std::string key, queue;
      std::uint64_t seq, revision;
      Lease lease;
    };
    std::vector<Suspect> suspects;
    client_.each("lease.*.*", [&](const std::string& key, const Record& r) {
      auto dot1 = key.find('.'), dot2 = key.rfind('.');
      auto name = decode_name(key.substr(dot1 + 1, dot2 - dot1 - 1));
      std::uint64_t seq = 0;
      try {
        seq = std::stoull(key.substr(dot2 + 1));
      } catch (const std::exception&) {
      }
      if (!name || seq == 0) {
        problem(fmt::format("record {}: not a lease record (its key does not read)", key));
        return;
      }
      Lease l;
      try {
        l = Lease::decode(r.value);
      } catch (const Error& e) {
        problem(fmt::format("queue {}: message {}: {}", *name, q::message_id(seq), e.what()));
        return;
      }
      auto q = queues_.find(*name);
      if (q == queues_.end() || !q->second.stream) {
        suspects.push_back({key, *name, seq, r.revision, l});
        return;
      }
      if (seq > q->second.last_seq || !stored(names_.stream(*name), seq))
        suspects.push_back({key, *name, seq, r.revision, l});
    });
    for (const char* kind : {"done", "wait"})
      client_.each(std::string(kind) + ".*.*", [&](const std::string& key, const Record&) {
        auto dot1 = key.find('.'), dot2 = key.rfind('.');
        auto name = decode_name(key.substr(dot1 + 1, dot2 - dot1 - 1));
        if (!name || !queues_.count(*name))
          problem(fmt::format("record {}: {} record of no queue{}", key,
                              std::string(kind) == "done" ? "an idempotency-key" : "a FIFO wait",
                              name ? " (" + *name + ")" : ""));
      });
    // Claims (Client::put_if) left by a writer killed after its claim: one
    // older than a claim lives is removed, by the cluster's clock.
    std::vector<std::uint64_t> stale_claims;
    Millis server_now = 0;
    client_.each("cas.*", [&](const std::string& key, const Record& r) {
      auto dated = client_.get_dated(key);
      if (!dated || dated->record.revision != r.revision) return;
      if (server_now == 0) server_now = client_.server_now();
      if (server_now - dated->written_at > Client::kStaleClaim) stale_claims.push_back(r.revision);
    });
    for (auto revision : stale_claims) client_.remove(revision);
    // Looked at again: a receive or a send may have been under way.
    for (const auto& s : suspects) {
      auto now = client_.get(s.key);
      if (!now || now->revision != s.revision) continue;
      auto id = q::message_id(s.seq);
      auto q = queues_.find(s.queue);
      if (q == queues_.end() || !q->second.stream) {
        problem(fmt::format("queue {}: message {}: lease record of no queue (record {})", s.queue,
                            id, s.key));
        continue;
      }
      if (stored(names_.stream(s.queue), s.seq)) continue;
      // Leftovers of a process killed at the last step, whose message is
      // gone: an ack's lease (its message left the stream), a finished
      // dead-letter move's (its dead letter is there). Removed now, as the
      // dying process would have: nothing is wrong with the queue.
      if (s.lease.state == Lease::Acked ||
          (s.lease.state == Lease::Dead && dead_.find(s.queue, id))) {
        client_.remove(s.revision);
        continue;
      }
      switch (s.lease.state) {
        case Lease::Dead:
          problem(fmt::format(
              "queue {}: message {}: leftover dead-letter lease: the message is "
              "gone from the stream{} (record {})",
              s.queue, id,
              dead_.find(s.queue, id) ? " and is a dead letter" : ", and no dead letter has its id",
              s.key));
          break;
        case Lease::Acked:
          problem(
              fmt::format("queue {}: message {}: acked, and its lease record outlived it "
                          "(record {})",
                          s.queue, id, s.key));
          break;
        default:
          problem(
              fmt::format("queue {}: message {}: lease record whose message is gone from "
                          "the stream (record {})",
                          s.queue, id, s.key));
      }
    }
  }
};

}  // namespace

std::vector<std::string> verify_namespace(Client& client, const Names& names, DeadLetters& dead) {
  return Verifier(client, names, dead).run();
}

}  // namespace q::nats
