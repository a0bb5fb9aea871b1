// Service::Impl, the state behind serve::Service (the broker, its mutex, the
// long polls' condition variable, the move tasks) and the actions, written in
// service.cpp (settings, dispatch), queue_actions.cpp, message_actions.cpp and
// redrive_actions.cpp.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/serve/group_commit.hpp"
#include "cli/serve/message_attributes.hpp"
#include "cli/serve/service.hpp"
#include "cli/serve/service_input.hpp"
#include "cli/serve/sqs_error.hpp"

namespace serve {

struct Service::Impl {
  using json = nlohmann::json;

  std::unique_ptr<q::Broker> broker;
  const q::Clock& clock;
  std::mutex mutex;  // one broker call at a time
  std::condition_variable changed;
  std::uint64_t generation = 0;
  bool stopping = false;
  std::deque<MoveTask> tasks;  // the last move tasks, newest first
  std::mt19937_64 random{std::random_device{}()};

  // Group commit (group_commit.hpp): SendMessage and DeleteMessage(Batch)
  // requests that meet are committed together. Off with --no-group-commit.
  struct PendingSend {
    std::string queue;
    q::OutgoingMessage message;
    std::optional<q::Millis> delay;
    q::SendResult result;
    bool done = false;
    std::exception_ptr error;
  };
  struct PendingDelete {
    std::string queue;
    std::vector<std::string> receipts;
    std::vector<q::ReceiptResult> results;
    bool done = false;
    std::exception_ptr error;
  };
  bool group_commit = true;
  // The backend stores all of a failed send or ack or none (Capabilities):
  // only then may a refused shared commit be tried request by request.
  bool all_or_nothing = false;
  std::uint64_t commits = 0;  // the broker calls that stored them
  GroupCommit<PendingSend> sends;
  GroupCommit<PendingDelete> deletes;

  Impl(std::unique_ptr<q::Broker> b, const q::Clock& c) : broker(std::move(b)), clock(c) {}

  template <class F>
  auto locked(const std::string& queue, F f) {
    std::lock_guard<std::mutex> lock(mutex);
    try {
      return f(*broker);
    } catch (const q::Error& e) {
      throw from_q(e, queue);
    }
  }

  // service.cpp: the settings doc, URLs and ARNs, waking long polls
  json settings();
  void update_settings(const std::function<void(json&)>& change);
  std::string url(const RequestInfo& info, const std::string& queue) const;
  static std::string arn(const RequestInfo& info, const std::string& queue);
  void bump();

  // queue_actions.cpp
  void read_queue_attributes(const json& attributes, const std::string& queue, bool creating,
                             q::ConfigChange& change, json& extra);
  void check_dlq_exists(const json& extra);
  void merge_settings(const std::string& queue, const json& extra);
  json create_queue(const json& in, const RequestInfo& info);
  q::QueueStats stats_of(const std::string& queue);
  // Its settings only: what a send or delete checks (one record read).
  q::QueueConfig config_of(const std::string& queue);
  json get_queue_url(const json& in, const RequestInfo& info);
  json list_queues(const json& in, const RequestInfo& info);
  json get_queue_attributes(const json& in, const RequestInfo& info);
  json set_queue_attributes(const json& in);
  json delete_queue(const json& in);
  json purge_queue(const json& in);

  // message_actions.cpp
  q::OutgoingMessage outgoing(const json& in, const q::QueueConfig& config,
                              const std::string& queue, AttributeMap& attributes,
                              std::optional<q::Millis>& delay);
  json sent_reply(const q::SendResult& r, const std::string& body, const AttributeMap& attributes,
                  bool fifo);
  json send_message(const json& in);
  void commit_sends(const std::vector<PendingSend*>& batch);
  void commit_deletes(const std::vector<PendingDelete*>& batch);
  static void check_entries(const json& in, const char* action);
  static json failed(const std::string& id, const SqsError& e);
  json send_message_batch(const json& in);
  json message_json(const q::Message& m, const std::vector<std::string>& system,
                    const std::vector<std::string>& attribute_names);
  json receive_message(const json& in);
  json delete_batch(const std::string& queue,
                    const std::vector<std::pair<std::string, std::string>>& entries,
                    bool& any_error, json& failures);
  static SqsError receipt_invalid(const std::string& receipt, const std::string& detail);
  static SqsError receipt_expired(const std::string& receipt);
  json delete_message(const json& in);
  json delete_message_batch(const json& in);
  void change_visibility(const std::string& queue, const std::string& receipt, q::Millis timeout);
  json change_message_visibility(const json& in);
  json change_message_visibility_batch(const json& in);

  // redrive_actions.cpp
  json list_dead_letter_source_queues(const json& in, const RequestInfo& info);
  json start_message_move_task(const json& in, const RequestInfo& info);
  json list_message_move_tasks(const json& in);
  json cancel_message_move_task(const json& in);
};

}  // namespace serve
