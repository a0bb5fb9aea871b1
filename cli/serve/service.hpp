// The SQS actions over a q::Broker, protocol-free: each takes the request as
// the AWS JSON 1.0 protocol shapes it (the query protocol's form is turned
// into the same shape first, wire.hpp) and returns the reply in that shape.
// Errors are SqsError.
#pragma once

#include <cstdint>
#include <utility>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "libq/broker.hpp"

namespace serve {

// The account in queue URLs and ARNs: one per server, like ElasticMQ's.
constexpr const char* kAccount = "000000000000";
// Settings SQS has and q's queue config does not (RedrivePolicy's target,
// ReceiveMessageWaitTimeSeconds) are kept as JSON in this queue of the same
// file or cluster, so every q serve on it agrees; it is left out of ListQueues.
constexpr const char* kSettingsQueue = "q-serve.settings";
// Its retention is the longest q allows; q counts it from the send, so the doc
// is written again when it is older than kSettingsRefresh (at start and on a
// read): it lapses only if no q serve starts or reads it for that long.
constexpr q::Millis kSettingsRetention = 365 * q::kDay;
constexpr q::Millis kSettingsRefresh = 30 * q::kDay;
// How long a writer of the doc holds it (update_settings).
constexpr q::Millis kSettingsLease = 10 * q::kSecond;

struct RequestInfo {
  std::string host;    // the Host header: queue URLs are http://HOST/ACCOUNT/QUEUE
  std::string region;  // from the signature's scope; ARNs carry it
  bool tls = false;
};

struct MoveTask {
  std::string handle, source_arn, destination_arn, status;
  std::uint64_t moved = 0, to_move = 0;
  q::Millis started = 0;
  double rate = 0;
};

class Service {
 public:
  Service(std::unique_ptr<q::Broker> broker, const q::Clock& clock);
  ~Service();
  nlohmann::json call(const std::string& action, const nlohmann::json& in, const RequestInfo& info);
  // Wakes long polls: something may have become visible.
  void notify();
  // Stops long polls (the server is stopping).
  void stop();
  // Group commit of SendMessage and DeleteMessage(Batch) (on unless
  // --no-group-commit); and what it did: requests served, commits made.
  void set_group_commit(bool on);
  std::pair<std::uint64_t, std::uint64_t> group_commit_counts();
  const q::Clock& clock() const { return clock_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const q::Clock& clock_;
};

}  // namespace serve
