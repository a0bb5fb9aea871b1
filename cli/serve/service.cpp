#include "cli/serve/service.hpp"

#include <fmt/format.h>

#include "libq/error.hpp"
#include "cli/serve/service_impl.hpp"

namespace serve {

using nlohmann::json;

// The settings doc: {"QUEUE": {"dlq": NAME, "wait": SECONDS}, ...}; the
// newest message of kSettingsQueue (called with the mutex held).
json Service::Impl::settings() {
  try {
    auto all = broker->peek(kSettingsQueue, 1000);
    if (all.empty()) return json::object();
    auto doc = json::parse(all.back().body, nullptr, false);
    return doc.is_object() ? doc : json::object();
  } catch (const q::Error& e) {
    if (e.kind() == q::ErrorKind::NotFound) return json::object();
    throw;
  }
}

// The new doc is stored before the old ones go, so a crash between the two
// leaves the newest (the one read) standing.
void Service::Impl::save_settings(const json& doc) {
  auto sent = broker->send(kSettingsQueue, {q::OutgoingMessage{doc.dump(), {}, {}, {}}}, {});
  q::ReceiveOptions options;
  options.max_messages = 100;
  auto old = broker->receive(kSettingsQueue, options);
  std::vector<std::string> receipts;
  for (const auto& m : old) {
    if (m.id == sent[0].id)
      broker->nack(kSettingsQueue, m.receipt, {});
    else
      receipts.push_back(m.receipt);
  }
  if (!receipts.empty()) broker->ack(kSettingsQueue, receipts);
}

std::string Service::Impl::url(const RequestInfo& info, const std::string& queue) const {
  return fmt::format("{}://{}/{}/{}", info.tls ? "https" : "http", info.host, kAccount, queue);
}

std::string Service::Impl::arn(const RequestInfo& info, const std::string& queue) {
  return fmt::format("arn:aws:sqs:{}:{}:{}", info.region.empty() ? "us-east-1" : info.region,
                     kAccount, queue);
}

void Service::Impl::bump() {
  ++generation;
  changed.notify_all();
}

Service::Service(std::unique_ptr<q::Broker> broker, const q::Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(broker), clock)), clock_(clock) {
  // Creating the settings queue publishes a new file at once: until its first
  // commit a new file is staged, and other creators in its directory wait.
  q::ConfigChange change;
  change.max_receives = 0;
  change.retention = 365 * q::kDay;
  impl_->broker->create_queue(kSettingsQueue, change);
  impl_->all_or_nothing = impl_->broker->capabilities().all_or_nothing;
}
Service::~Service() = default;

void Service::set_group_commit(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->group_commit = on;
}

std::pair<std::uint64_t, std::uint64_t> Service::group_commit_counts() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return {impl_->sends.items() + impl_->deletes.items(), impl_->commits};
}

void Service::notify() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->bump();
}

void Service::stop() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stopping = true;
  impl_->changed.notify_all();
}

json Service::call(const std::string& action, const json& in, const RequestInfo& info) {
  auto& s = *impl_;
  if (action == "CreateQueue") return s.create_queue(in, info);
  if (action == "GetQueueUrl") return s.get_queue_url(in, info);
  if (action == "ListQueues") return s.list_queues(in, info);
  if (action == "GetQueueAttributes") return s.get_queue_attributes(in, info);
  if (action == "SetQueueAttributes") return s.set_queue_attributes(in);
  if (action == "DeleteQueue") return s.delete_queue(in);
  if (action == "PurgeQueue") return s.purge_queue(in);
  if (action == "SendMessage") return s.send_message(in);
  if (action == "SendMessageBatch") return s.send_message_batch(in);
  if (action == "ReceiveMessage") return s.receive_message(in);
  if (action == "DeleteMessage") return s.delete_message(in);
  if (action == "DeleteMessageBatch") return s.delete_message_batch(in);
  if (action == "ChangeMessageVisibility") return s.change_message_visibility(in);
  if (action == "ChangeMessageVisibilityBatch") return s.change_message_visibility_batch(in);
  if (action == "ListDeadLetterSourceQueues") return s.list_dead_letter_source_queues(in, info);
  if (action == "StartMessageMoveTask") return s.start_message_move_task(in, info);
  if (action == "ListMessageMoveTasks") return s.list_message_move_tasks(in);
  if (action == "CancelMessageMoveTask") return s.cancel_message_move_task(in);
  if (action == "TagQueue" || action == "UntagQueue" || action == "ListQueueTags" ||
      action == "AddPermission" || action == "RemovePermission")
    throw SqsError(400, "AWS.SimpleQueueService.UnsupportedOperation", "UnsupportedOperation",
                   action + " is not supported by q serve.");
  throw SqsError(400, "InvalidAction", "InvalidAction",
                 "The action " + action + " is not valid for this endpoint.");
}

}  // namespace serve
