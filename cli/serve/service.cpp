#include "cli/serve/service.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/ids.hpp"
#include "cli/serve/service_impl.hpp"

namespace serve {

using nlohmann::json;

// The settings doc: {"QUEUE": {"dlq": NAME, "wait": SECONDS}, ...}; the
// newest message of kSettingsQueue, in flight or not (called with the mutex
// held). A doc older than kSettingsRefresh is written again (unchanged), so it
// never reaches the queue's retention while a q serve uses the file.
json Service::Impl::settings() {
  try {
    auto all = broker->peek(kSettingsQueue, 1000);
    if (all.empty()) return json::object();
    auto doc = json::parse(all.back().body, nullptr, false);
    if (!doc.is_object()) doc = json::object();
    if (clock.now() - all.back().sent_at > kSettingsRefresh) {
      try {
        update_settings([](json&) {});
      } catch (const std::exception&) {
        // Read anyway; the next read tries again.
      }
    }
    return doc;
  } catch (const q::Error& e) {
    if (e.kind() == q::ErrorKind::NotFound) return json::object();
    throw;
  }
}

// A read-modify-write of the doc that another q serve on the same file or
// cluster cannot interleave with: the writer receives the docs (q's lease
// makes it their only holder; another writer receives nothing and waits),
// applies `change` to the newest, sends the result, and acks what it received.
// Should the lease have run out before the ack (the ack is stale), another
// writer may have read the old doc meanwhile and stored its own successor:
// the doc this writer stored is a fork that lacks the other's update, so it
// is received and dropped (never built on), and the change is applied again
// to the other's, so neither update is lost. The new doc is stored before the
// old ones go, so a crash between the two leaves the newest standing; a
// crashed writer's lease lapses after kSettingsLease.
//
// With no doc at all (a new settings queue, or one emptied by hand), writers
// that meet must not each store a first doc: two docs built on by two
// writers at once would fork the history the same way. The first doc's dedup
// id names the queue's lifetime send count read before the queue was seen
// empty, so writers that saw the same empty queue store one doc between them.
void Service::Impl::update_settings(const std::function<void(json&)>& change) {
  const auto deadline =
      std::chrono::steady_clock::now() + 3 * std::chrono::milliseconds(kSettingsLease);
  std::set<std::string> forks;  // docs this call stored whose ack came back stale
  for (;;) {
    // Looked at first (a read): receiving is a write, not to be repeated
    // every few milliseconds while another writer holds the doc.
    auto docs = broker->peek(kSettingsQueue, 1000);
    if (docs.empty()) {
      // The send count is read before a second look (only here, not in the
      // wait above): a doc stored after the read makes that look non-empty,
      // so an empty one means no doc was stored since `sent`.
      auto before = broker->stats(kSettingsQueue);
      std::uint64_t sent = before.empty() ? 0 : before[0].counters.sent;
      if (broker->peek(kSettingsQueue, 1).empty())
        broker->send(
            kSettingsQueue,
            {q::OutgoingMessage{"{}", {}, fmt::format("q-serve.settings.first.{}", sent), {}}}, {});
      continue;
    }
    std::vector<q::Message> held;
    if (std::any_of(docs.begin(), docs.end(),
                    [](const q::Message& m) { return m.state == q::MessageState::Visible; })) {
      q::ReceiveOptions options;
      options.max_messages = 100;
      options.visibility_timeout = kSettingsLease;
      held = broker->receive(kSettingsQueue, options);
    }
    if (held.empty()) {
      // Another writer holds the doc.
      if (std::chrono::steady_clock::now() > deadline)
        throw SqsError(503, "ServiceUnavailable", "ServiceUnavailable",
                       "another q serve is changing the settings (q-serve.settings); try again",
                       false);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    std::vector<std::string> receipts;
    for (const auto& m : held) receipts.push_back(m.receipt);
    // The newest by send that is not one of this call's forks (a doc whose
    // lease lapsed is received in the order it became visible again).
    const q::Message* newest = nullptr;
    for (const auto& m : held) {
      if (forks.count(m.id)) continue;
      if (!newest ||
          q::parse_message_id(newest->id).value_or(0) < q::parse_message_id(m.id).value_or(0))
        newest = &m;
    }
    if (!newest) {
      // Only forks: drop them; the doc they forked from is another writer's.
      broker->ack(kSettingsQueue, receipts);
      continue;
    }
    json doc = json::parse(newest->body, nullptr, false);
    if (!doc.is_object()) doc = json::object();
    change(doc);
    auto stored = broker->send(kSettingsQueue, {q::OutgoingMessage{doc.dump(), {}, {}, {}}}, {});
    bool stale = false;
    for (const auto& r : broker->ack(kSettingsQueue, receipts))
      stale = stale || r.outcome == q::ReceiptOutcome::Stale;
    if (!stale) return;
    for (const auto& r : stored) forks.insert(r.id);
  }
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
  change.retention = kSettingsRetention;
  bool created = impl_->broker->create_queue(kSettingsQueue, change);
  // A doc near the end of its retention is refreshed now, not at the next read.
  if (!created) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->settings();
  }
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
