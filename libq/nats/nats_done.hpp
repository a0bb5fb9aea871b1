// Idempotency records of `q work` on JetStream (ARCHITECTURE.md, "Distributed
// backend", q work): done.<Q>.<hash of key> in the namespace's bucket holds
// until when the key counts as done. ack_done writes it before the ack, so a
// done key is never lost to a crash between the two (as on a file, where
// both are one transaction, a stale receipt still records the key).
#pragma once

#include <string>

#include "clock.hpp"
#include "nats_client.hpp"

namespace q::nats {

class DoneBook {
 public:
  explicit DoneBook(Client& client) : client_(client) {}
  // Records `key` of `queue` as done until `until` (replacing an older record).
  void record(const std::string& queue, const std::string& key, Millis until);
  // Whether `key` is done at `now`; a record past its time is removed.
  bool is_done(const std::string& queue, const std::string& key, Millis now);

  static std::string prefix(const std::string& queue) { return "done." + encode_name(queue) + "."; }

 private:
  Client& client_;
  static std::string key_of(const std::string& queue, const std::string& key);
};

}  // namespace q::nats
