// Dead-letter queues: ListDeadLetterSourceQueues, and Start/List/CancelMessageMoveTask
// as q's redrive.
#include "cli/serve/service_impl.hpp"

#include <fmt/format.h>

#include "libq/error.hpp"

namespace serve {

using nlohmann::json;

json Service::Impl::list_dead_letter_source_queues(const json& in, const RequestInfo& info) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  std::lock_guard<std::mutex> lock(mutex);
  json urls = json::array();
  try {
    config_of(queue);
    json doc = settings();
    for (const auto& [source, entry] : doc.items())
      if (entry.value("dlq", "") == queue) urls.push_back(url(info, source));
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
  return {{"queueUrls", urls}};
}

// StartMessageMoveTask from a dead-letter queue: q's redrive of the dead
// letters of each queue whose RedrivePolicy names it, to their own queue or
// to DestinationArn; done before the reply (a task is COMPLETED at once).
json Service::Impl::start_message_move_task(const json& in, const RequestInfo& info) {
  std::string source_arn = required(in, "SourceArn");
  std::string dlq = queue_from_arn(source_arn, "SourceArn");
  std::string destination =
      has(in, "DestinationArn") ? queue_from_arn(str(in, "DestinationArn"), "DestinationArn") : "";
  double rate = has(in, "MaxNumberOfMessagesPerSecond")
                    ? static_cast<double>(integer(in["MaxNumberOfMessagesPerSecond"],
                                                  "MaxNumberOfMessagesPerSecond", 1, 500))
                    : 0;
  std::lock_guard<std::mutex> lock(mutex);
  MoveTask task;
  try {
    config_of(dlq);
    if (!destination.empty()) config_of(destination);
    std::vector<std::string> sources;
    json doc = settings();
    for (const auto& [source, entry] : doc.items())
      if (entry.value("dlq", "") == dlq) sources.push_back(source);
    if (sources.empty())
      throw invalid_parameter(
          fmt::format("Source queue {} is not a dead-letter queue of any "
                      "queue.",
                      source_arn));
    for (const auto& t : tasks)
      if (t.source_arn == source_arn && t.status == "RUNNING")
        throw SqsError(400, "UnsupportedOperation", "UnsupportedOperation",
                       "There is already a task running for this queue.");
    task.handle = fmt::format("{:016x}", random());
    task.source_arn = source_arn;
    task.destination_arn = has(in, "DestinationArn") ? str(in, "DestinationArn") : "";
    task.started = clock.now();
    task.rate = rate;
    for (const auto& source : sources) {
      q::RedriveOptions options;
      options.to = destination;
      options.skip_missing = true;
      task.moved += broker->redrive(source, options).size();
    }
    task.to_move = task.moved;
    task.status = "COMPLETED";
  } catch (const q::Error& e) {
    throw from_q(e, dlq);
  }
  tasks.push_front(task);
  if (tasks.size() > 10) tasks.pop_back();
  bump();
  (void)info;
  return {{"TaskHandle", task.handle}};
}

json Service::Impl::list_message_move_tasks(const json& in) {
  std::string source_arn = required(in, "SourceArn");
  std::size_t max = has(in, "MaxResults") ? integer(in["MaxResults"], "MaxResults", 1, 10) : 1;
  json results = json::array();
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& t : tasks) {
    if (t.source_arn != source_arn || results.size() == max) continue;
    json r = {{"TaskHandle", t.handle},
              {"Status", t.status},
              {"SourceArn", t.source_arn},
              {"ApproximateNumberOfMessagesMoved", t.moved},
              {"ApproximateNumberOfMessagesToMove", t.to_move},
              {"StartedTimestamp", t.started}};
    if (!t.destination_arn.empty()) r["DestinationArn"] = t.destination_arn;
    if (t.rate > 0) r["MaxNumberOfMessagesPerSecond"] = static_cast<int>(t.rate);
    results.push_back(r);
  }
  return {{"Results", results}};
}

json Service::Impl::cancel_message_move_task(const json& in) {
  std::string handle = required(in, "TaskHandle");
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& t : tasks)
    if (t.handle == handle)
      throw SqsError(400, "FailedPrecondition", "UnsupportedOperation",
                     "The task " + handle +
                         " has already completed: q moves the messages "
                         "before StartMessageMoveTask replies.");
  throw SqsError(404, "ResourceNotFoundException", "ResourceNotFoundException",
                 "No message movement task with handle " + handle + ".");
}

}  // namespace serve
