// The queue actions: CreateQueue, GetQueueUrl, ListQueues, Get/SetQueueAttributes,
// DeleteQueue, PurgeQueue, and the SQS queue attributes as q's config.
#include "cli/serve/service_impl.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "libq/error.hpp"

namespace serve {

using nlohmann::json;

// CreateQueue and SetQueueAttributes: SQS attributes -> q's config and the settings doc.
void Service::Impl::read_queue_attributes(const json& attributes, const std::string& queue,
                                          bool creating, q::ConfigChange& change, json& extra) {
  if (attributes.is_null()) return;
  if (!attributes.is_object()) throw invalid_parameter("Attributes must be a map");
  for (const auto& [name, v] : attributes.items()) {
    if (name == "VisibilityTimeout")
      change.visibility_timeout = integer(v, name, 0, 43200, true) * q::kSecond;
    else if (name == "MessageRetentionPeriod")
      change.retention = integer(v, name, 60, 1209600, true) * q::kSecond;
    else if (name == "DelaySeconds")
      change.delay = integer(v, name, 0, 900, true) * q::kSecond;
    else if (name == "MaximumMessageSize")
      change.max_size = static_cast<std::uint32_t>(integer(v, name, 1024, kMaxMessageSize, true));
    else if (name == "ReceiveMessageWaitTimeSeconds")
      extra["wait"] = integer(v, name, 0, 20, true);
    else if (name == "FifoQueue" || name == "ContentBasedDeduplication") {
      std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s != "true" && s != "false")
        throw invalid_attribute(fmt::format("Invalid value for the parameter {}.", name));
      bool on = s == "true";
      if (name == "FifoQueue") {
        if (!creating)
          throw invalid_attribute(
              "Invalid value for the parameter FifoQueue: it is fixed "
              "when the queue is created.");
        change.fifo = on;
      } else {
        change.content_dedup = on;
      }
    } else if (name == "RedrivePolicy") {
      std::string text = v.is_string() ? v.get<std::string>() : v.dump();
      if (text.empty()) {
        change.max_receives = 0;
        extra["dlq"] = nullptr;
        continue;
      }
      auto policy = json::parse(text, nullptr, false);
      if (!policy.is_object() || !has(policy, "deadLetterTargetArn") ||
          !has(policy, "maxReceiveCount"))
        throw invalid_attribute(
            "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a "
            "JSON object with deadLetterTargetArn and maxReceiveCount.");
      std::string target = queue_from_arn(str(policy, "deadLetterTargetArn"), "RedrivePolicy");
      if (target == queue)
        throw invalid_attribute(
            "Value for parameter RedrivePolicy is invalid. Reason: a "
            "queue cannot be its own dead-letter queue.");
      change.max_receives = static_cast<std::uint32_t>(
          integer(policy["maxReceiveCount"], "maxReceiveCount", 1, q::kMaxMaxReceives, true));
      extra["dlq"] = target;
    } else if (name == "Policy" || name == "KmsMasterKeyId" ||
               name == "KmsDataKeyReusePeriodSeconds" || name == "SqsManagedSseEnabled" ||
               name == "DeduplicationScope" || name == "FifoThroughputLimit" ||
               name == "RedriveAllowPolicy") {
      // Accepted and not kept: one host, one account; SQS's server-side
      // encryption, access policies and throughput modes have no meaning here.
    } else {
      throw SqsError(400, "InvalidAttributeName", "InvalidAttributeName",
                     fmt::format("Unknown Attribute {}.", name));
    }
  }
}

void Service::Impl::check_dlq_exists(const json& extra) {
  if (extra.contains("dlq") && extra["dlq"].is_string()) {
    std::string dlq = extra["dlq"];
    auto all = broker->list_queues();
    if (std::find(all.begin(), all.end(), dlq) == all.end())
      throw invalid_attribute(fmt::format(
          "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target does not "
          "exist: {}",
          dlq));
  }
}

void Service::Impl::merge_settings(const std::string& queue, const json& extra) {
  if (extra.empty()) return;
  update_settings([&](json& doc) {
    json entry = doc.contains(queue) ? doc[queue] : json::object();
    for (const auto& [k, v] : extra.items()) {
      if (v.is_null())
        entry.erase(k);
      else
        entry[k] = v;
    }
    if (entry.empty())
      doc.erase(queue);
    else
      doc[queue] = entry;
  });
}

json Service::Impl::create_queue(const json& in, const RequestInfo& info) {
  std::string queue = required(in, "QueueName");
  if (queue.size() > 80 ||
      !std::all_of(
          queue.begin(), queue.end(),
          [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.'; }) ||
      queue == kSettingsQueue)
    throw invalid_parameter(
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in "
        "length");
  q::ConfigChange change;
  json extra = json::object();
  read_queue_attributes(in.value("Attributes", json()), queue, true, change, extra);
  bool fifo_name = queue.size() > 5 && queue.compare(queue.size() - 5, 5, ".fifo") == 0;
  if (change.fifo.value_or(false) != fifo_name)
    throw invalid_parameter(fifo_name ? "The name of a FIFO queue can only include "
                                        "alphanumeric characters, hyphens, or underscores, must "
                                        "end with .fifo suffix. Set FifoQueue to true."
                                      : "The name of a FIFO queue must end with .fifo.");
  if (change.content_dedup.value_or(false) && !fifo_name)
    throw invalid_attribute("ContentBasedDeduplication is for FIFO queues only.");
  // SQS's defaults where q's differ: no dead-lettering without a
  // RedrivePolicy, SQS's size limit.
  if (!change.max_receives) change.max_receives = 0;
  if (!change.max_size) change.max_size = kMaxMessageSize;
  if (!change.retention) change.retention = 4 * q::kDay;
  std::lock_guard<std::mutex> lock(mutex);
  try {
    check_dlq_exists(extra);
    broker->create_queue(queue, change);
    merge_settings(queue, extra);
  } catch (const q::Error& e) {
    if (e.remedy() == q::Remedy::ChangeConfig)
      throw SqsError(400, "QueueAlreadyExists", "QueueNameExists",
                     fmt::format("A queue already exists with the same name and a different "
                                 "value for attribute {}",
                                 e.field()));
    throw from_q(e, queue);
  }
  return {{"QueueUrl", url(info, queue)}};
}

q::QueueConfig Service::Impl::config_of(const std::string& queue) {
  auto config = broker->queue_config(queue);
  if (!config) throw no_such_queue(queue);
  return *config;
}

q::QueueStats Service::Impl::stats_of(const std::string& queue) {
  auto all = broker->stats(queue);
  if (all.empty()) throw no_such_queue(queue);
  return all[0];
}

json Service::Impl::get_queue_url(const json& in, const RequestInfo& info) {
  std::string queue = required(in, "QueueName");
  if (queue == kSettingsQueue) throw no_such_queue(queue);
  locked(queue, [&](q::Broker&) { return config_of(queue); });
  return {{"QueueUrl", url(info, queue)}};
}

json Service::Impl::list_queues(const json& in, const RequestInfo& info) {
  std::string prefix = str(in, "QueueNamePrefix");
  std::size_t max = has(in, "MaxResults") ? integer(in["MaxResults"], "MaxResults", 1, 1000) : 1000;
  std::string after = str(in, "NextToken");
  auto all = locked("", [&](q::Broker& b) { return b.list_queues(); });
  std::sort(all.begin(), all.end());
  json urls = json::array();
  json out = json::object();
  for (const auto& name : all) {
    if (name == kSettingsQueue || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!after.empty() && name <= after) continue;
    if (urls.size() == max) {
      out["NextToken"] = urls.empty() ? "" : queue_from_url(urls.back());
      break;
    }
    urls.push_back(url(info, name));
  }
  if (!urls.empty()) out["QueueUrls"] = urls;
  return out;
}

json Service::Impl::get_queue_attributes(const json& in, const RequestInfo& info) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  auto wanted_names = names(in, "AttributeNames");
  static const std::set<std::string> known = {"All",
                                              "ApproximateNumberOfMessages",
                                              "ApproximateNumberOfMessagesNotVisible",
                                              "ApproximateNumberOfMessagesDelayed",
                                              "CreatedTimestamp",
                                              "LastModifiedTimestamp",
                                              "QueueArn",
                                              "VisibilityTimeout",
                                              "MaximumMessageSize",
                                              "MessageRetentionPeriod",
                                              "DelaySeconds",
                                              "ReceiveMessageWaitTimeSeconds",
                                              "RedrivePolicy",
                                              "FifoQueue",
                                              "ContentBasedDeduplication",
                                              "Policy",
                                              "KmsMasterKeyId",
                                              "KmsDataKeyReusePeriodSeconds",
                                              "SqsManagedSseEnabled",
                                              "DeduplicationScope",
                                              "FifoThroughputLimit",
                                              "RedriveAllowPolicy"};
  for (const auto& n : wanted_names)
    if (!known.count(n))
      throw SqsError(400, "InvalidAttributeName", "InvalidAttributeName",
                     fmt::format("Unknown Attribute {}.", n));
  std::lock_guard<std::mutex> lock(mutex);
  q::QueueStats s;
  json doc;
  std::uint64_t dead_of_sources = 0;
  try {
    s = stats_of(queue);
    doc = settings();
    // A dead-letter queue's depth counts the dead letters of its sources:
    // in q they stay with the queue they died in (`q dlq list SOURCE`).
    for (const auto& [source, entry] : doc.items())
      if (entry.value("dlq", "") == queue) {
        auto st = broker->stats(source);
        if (!st.empty()) dead_of_sources += st[0].dead;
      }
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
  json entry = doc.contains(queue) ? doc[queue] : json::object();
  json a = json::object();
  auto put = [&](const char* name, const std::string& value) {
    if (wanted(wanted_names, name)) a[name] = value;
  };
  put("ApproximateNumberOfMessages", std::to_string(s.visible + dead_of_sources));
  put("ApproximateNumberOfMessagesNotVisible", std::to_string(s.in_flight));
  put("ApproximateNumberOfMessagesDelayed", std::to_string(s.delayed));
  put("CreatedTimestamp", seconds(s.created_at));
  put("LastModifiedTimestamp", seconds(s.created_at));
  put("QueueArn", arn(info, queue));
  put("VisibilityTimeout", seconds(s.config.visibility_timeout));
  put("MaximumMessageSize", std::to_string(s.config.max_size));
  put("MessageRetentionPeriod", seconds(s.config.retention));
  put("DelaySeconds", seconds(s.config.delay));
  put("ReceiveMessageWaitTimeSeconds", std::to_string(entry.value("wait", 0)));
  if (s.config.max_receives > 0 && entry.contains("dlq"))
    put("RedrivePolicy", json{{"deadLetterTargetArn", arn(info, entry["dlq"].get<std::string>())},
                              {"maxReceiveCount", s.config.max_receives}}
                             .dump());
  if (s.config.fifo) {
    put("FifoQueue", "true");
    put("ContentBasedDeduplication", s.config.content_dedup ? "true" : "false");
  }
  put("SqsManagedSseEnabled", "false");
  json out = json::object();
  if (!a.empty()) out["Attributes"] = a;
  return out;
}

json Service::Impl::set_queue_attributes(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  q::ConfigChange change;
  json extra = json::object();
  read_queue_attributes(in.value("Attributes", json()), queue, false, change, extra);
  std::lock_guard<std::mutex> lock(mutex);
  try {
    config_of(queue);
    check_dlq_exists(extra);
    if (!change.empty()) broker->configure(queue, change);
    merge_settings(queue, extra);
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
  bump();
  return json::object();
}

json Service::Impl::delete_queue(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  std::lock_guard<std::mutex> lock(mutex);
  try {
    broker->delete_queue(queue);
    if (settings().contains(queue)) update_settings([&](json& doc) { doc.erase(queue); });
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
  return json::object();
}

json Service::Impl::purge_queue(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  locked(queue, [&](q::Broker& b) { return b.purge(queue); });
  return json::object();
}

}  // namespace serve
