// Publishing q messages to a queue's stream: headers, Nats-Msg-Id for dedup
// and safe retries, pipelined batches (ARCHITECTURE.md, "Distributed backend",
// Send). The checks before (sizes, depth) are NatsBroker's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

// What q adds to a message's body in the one NATS message that carries it
// (ARCHITECTURE.md, "Message size"). JetStream takes at most 64 KiB of
// headers per message (error 10097), so that much of each max_payload is kept
// for them: q's own (ids, times, the dedup id, the group), the attributes
// (Q-Attrs) and, on the dead-letter copy, the reason and attempt history.
constexpr std::size_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kHeaderReserve = 4096;
// The dead-letter copy's reason and attempt history, each bounded to half of
// it (nats/dead.cpp), so every message can be dead-lettered.
constexpr std::size_t kDeadLetterReserve = 16 * 1024;
// What is left for the attributes as the Q-Attrs header's ASCII JSON.
constexpr std::size_t kMaxAttributesJson = kHeaderLimit - kHeaderReserve - kDeadLetterReserve;
constexpr std::size_t kMessageReserve = kHeaderLimit;
// The largest max size a cluster of this max_payload holds (Capabilities).
inline std::uint32_t max_size_for(std::int64_t max_payload) {
  if (max_payload <= static_cast<std::int64_t>(kMessageReserve)) return 0;
  return static_cast<std::uint32_t>(std::min<std::int64_t>(
      max_payload - static_cast<std::int64_t>(kMessageReserve), kMaxMaxSize));
}

class Publisher {
 public:
  Publisher(Client& client, const Names& names, const Clock& clock)
      : client_(client), names_(names), clock_(clock) {}
  // Publishes every message (pipelined when more than one), in order; a
  // message stored before (same dedup id in the window) comes back as a
  // duplicate with the first one's id. Error(Full) when the stream's max
  // depth refuses one (the ones before it were sent).
  std::vector<SendResult> publish(const std::string& queue, const QueueConfig& config,
                                  std::vector<OutgoingMessage>& messages);

  // The Q-Attrs header value (JSON, ASCII only: a header has no line breaks).
  static std::string attributes_json(const Attributes& attributes);
  // Messages of this publish become visible at `at` (Q-Visible-At header;
  // nats/delay.hpp); 0: at once.
  void visible_at(Millis at) { visible_at_ = at; }
  // Messages without a dedup id of the user's get the Nats-Msg-Id
  // `prefix` + their index in the publish instead of a random one of q's, so
  // publishing them again (a q work --to stage retried after a crash,
  // nats/stage.hpp) stores each once within the stream's dedup window.
  void own_ids(std::string prefix) { own_id_prefix_ = std::move(prefix); }

 private:
  struct Outgoing {
    std::size_t index = 0;  // in the publish's messages
    std::string token;      // unique to this send: the publish's token and the index
    std::string msg_id;     // Nats-Msg-Id
    bool own_id = false;    // Nats-Msg-Id is q's own (no dedup id of the user's)
    bool done = false;
    std::uint64_t seq = 0;
    bool duplicate = false;
  };
  Client& client_;
  const Names& names_;
  const Clock& clock_;
  Millis visible_at_ = 0;
  std::string own_id_prefix_;
  // Per publish: its random token (each message's is it and its index), the
  // queue's subject, the send time.
  std::string token_;
  std::string subject_;
  std::string sent_at_;

  Outgoing prepare(const QueueConfig& config, const OutgoingMessage& m, std::size_t index);
  // The NATS message of `o` (built again for a retry: the library takes what
  // it publishes asynchronously).
  MsgPtr build(const std::string& queue, const OutgoingMessage& m, const Outgoing& o);
  // The index of the message an asynchronous answer is for (by its Q-Send
  // token, else its Nats-Msg-Id "s" + token), or npos.
  std::size_t index_of(natsMsg* msg) const;
  [[noreturn]] void publish_failed(const std::string& queue, natsStatus s, jsErrCode code,
                                   const std::string& text);
  void settle_duplicate(const std::string& queue, Outgoing& o, bool retried);
  void publish_sync(const std::string& queue, const OutgoingMessage& m, Outgoing& o,
                    bool tried_before);
  void publish_async(const std::string& queue, const std::vector<OutgoingMessage>& messages,
                     std::vector<Outgoing>& out);
};

}  // namespace q::nats
