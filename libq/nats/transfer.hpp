// q export and q import on JetStream (ARCHITECTURE.md, "Distributed backend",
// Export, import, backup). Export reads the queue's stream message by message
// (direct gets, no consumer: nothing is delivered) with each message's lease
// record for its state, then the dead-letter stream. Import checks the whole
// input before it publishes anything; JetStream has no transaction over many
// publishes, so a run cut short mid-publish has stored a prefix, and each
// message carries a Nats-Msg-Id derived from it so that running the same
// import again within the stream's dedup window stores nothing twice.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "libq/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/dead.hpp"
#include "libq/nats/records.hpp"

namespace q::nats {

class Transfer {
 public:
  Transfer(Client& client, const Names& names, const Clock& clock, DeadLetters& dead)
      : client_(client), names_(names), clock_(clock), dead_(dead) {}

  // Every message of `queue` (settings `config`), live then dead, oldest first,
  // with its state as a file export gives it.
  void export_queue(const std::string& queue, const QueueConfig& config,
                    const std::function<void(const Message&)>& each);
  // Stores exported messages in `queue`; returns the ids they have there.
  // Ids are kept when every one of them can be (a q id, free in the queue,
  // and one the stream's sequence has passed, so no later send is given it);
  // else all get new ids. Error(InvalidData) or Error(Full) before anything
  // is published when any message is refused.
  std::vector<std::string> import(const std::string& queue, const QueueConfig& config,
                                  std::vector<Message> messages, bool skip_existing);

 private:
  Client& client_;
  const Names& names_;
  const Clock& clock_;
  DeadLetters& dead_;

  jsStreamState stream_state(const std::string& queue);
  MsgPtr stored(const std::string& queue, std::uint64_t seq);
  // Each message of the queue's stream with its sequence, oldest first.
  void each_stored(const std::string& queue,
                   const std::function<void(natsMsg*, std::uint64_t)>& each);
  std::uint64_t publish(const std::string& queue, natsMsg* msg, bool* duplicate);
  // Returns the sequence the letter had on the queue's stream.
  std::uint64_t import_dead(const std::string& queue, const QueueConfig& config, natsMsg* msg,
                            const Message& m);
};

}  // namespace q::nats
