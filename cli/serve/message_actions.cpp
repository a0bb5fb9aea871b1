// The message actions: SendMessage(Batch), ReceiveMessage (the long poll),
// DeleteMessage(Batch), ChangeMessageVisibility(Batch).
#include "cli/serve/service_impl.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cli/serve/crypto.hpp"
#include "libq/error.hpp"

namespace serve {

using nlohmann::json;

namespace {

// Errors that the rules raise before a send or an ack writes anything, on
// either backend. Full too where the backend is all or nothing: NATS checks
// the depth first but may still meet the stream's limit part-way (another
// sender), with the messages before it stored.
bool refused_before_storing(const q::Error& e, bool all_or_nothing) {
  switch (e.kind()) {
    case q::ErrorKind::InvalidData:
    case q::ErrorKind::NotFound:
    case q::ErrorKind::Usage: return true;
    case q::ErrorKind::Full: return all_or_nothing;
    default: return false;
  }
}

}  // namespace

// One entry of SendMessage(Batch), checked; the error names the entry's fault.
q::OutgoingMessage Service::Impl::outgoing(const json& in, const q::QueueConfig& config,
                                           const std::string& queue, AttributeMap& attributes,
                                           std::optional<q::Millis>& delay) {
  std::string body = required(in, "MessageBody");
  if (body.empty()) throw missing_parameter("MessageBody");
  if (!valid_body(body))
    throw SqsError(400, "InvalidMessageContents", "InvalidMessageContents",
                   "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | "
                   "#x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF");
  attributes = read_message_attributes(in);
  std::size_t size = body.size() + attributes_size(attributes);
  if (size > config.max_size)
    throw invalid_parameter(
        fmt::format("One or more parameters are invalid. Reason: Message "
                    "must be shorter than {} bytes.",
                    config.max_size));
  if (has(in, "DelaySeconds")) {
    if (config.fifo)
      throw invalid_parameter(
          "Value " + str(in, "DelaySeconds") +
          " for parameter DelaySeconds is invalid. Reason: The request include parameter "
          "that is not valid for this queue type.");
    delay = integer(in["DelaySeconds"], "DelaySeconds", 0, 900) * q::kSecond;
  }
  q::OutgoingMessage m{body, to_q(attributes), str(in, "MessageDeduplicationId"),
                       str(in, "MessageGroupId")};
  if (config.fifo) {
    if (m.group.empty()) throw missing_parameter("MessageGroupId");
    if (m.dedup_id.empty() && !config.content_dedup)
      throw invalid_parameter(
          "The queue should either have ContentBasedDeduplication enabled or "
          "MessageDeduplicationId provided explicitly");
  } else if (!m.group.empty() || !m.dedup_id.empty()) {
    throw invalid_parameter(fmt::format(
        "Value for parameter {} is invalid. Reason: The request include parameter that is "
        "not valid for this queue type.",
        m.group.empty() ? "MessageDeduplicationId" : "MessageGroupId"));
  }
  (void)queue;
  return m;
}

json Service::Impl::sent_reply(const q::SendResult& r, const std::string& body,
                               const AttributeMap& attributes, bool fifo) {
  json out = {{"MessageId", r.id}, {"MD5OfMessageBody", hex(md5(body))}};
  if (!attributes.empty()) out["MD5OfMessageAttributes"] = attributes_md5(attributes);
  if (fifo) out["SequenceNumber"] = sequence_number(r.id);
  return out;
}

json Service::Impl::send_message(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  PendingSend pending;
  pending.queue = queue;
  AttributeMap attributes;
  bool fifo = false;
  try {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto config = config_of(queue);
      fifo = config.fifo;
      pending.message = outgoing(in, config, queue, attributes, pending.delay);
    }
    std::string body = pending.message.body;
    if (group_commit) {
      sends.submit(pending, mutex, [this](const auto& batch) { commit_sends(batch); });
    } else {
      sends.submit_alone(pending, mutex, [this](const auto& batch) { commit_sends(batch); });
    }
    return sent_reply(pending.result, body, attributes, fifo);
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
}

// The sends of one queue with one delay go in one broker call: one
// transaction, one commit, in the order they arrived. Should the rules refuse
// that call (the queue full, or deleted meanwhile), nothing of it was stored,
// and each send is tried alone, so that each gets its own answer
// (commit_each_group).
void Service::Impl::commit_sends(const std::vector<PendingSend*>& batch) {
  std::map<std::pair<std::string, std::optional<q::Millis>>, std::vector<PendingSend*>> groups;
  for (PendingSend* p : batch) groups[{p->queue, p->delay}].push_back(p);
  bool any = false;
  auto send = [&](const std::vector<PendingSend*>& items) {
    std::vector<q::OutgoingMessage> messages;
    for (const PendingSend* p : items) messages.push_back(p->message);
    q::SendOptions options;
    options.delay = items.front()->delay;
    auto sent = broker->send(items.front()->queue, std::move(messages), options);
    ++commits;
    for (std::size_t i = 0; i < items.size(); ++i)
      items[i]->result = sent.at(i), items[i]->done = true;
    any = true;
  };
  commit_each_group<q::Error>(
      groups, send, [&](const q::Error& e) { return refused_before_storing(e, all_or_nothing); });
  if (any) bump();
}

void Service::Impl::check_entries(const json& in, const char* action) {
  if (!has(in, "Entries") || !in["Entries"].is_array() || in["Entries"].empty())
    throw SqsError(
        400, "AWS.SimpleQueueService.EmptyBatchRequest", "EmptyBatchRequest",
        "There should be at least one " + std::string(action) + "RequestEntry in the request.");
  if (in["Entries"].size() > kMaxBatch)
    throw SqsError(400, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                   "TooManyEntriesInBatchRequest",
                   fmt::format("Maximum number of entries per request are {}. You have sent {}.",
                               kMaxBatch, in["Entries"].size()));
  std::set<std::string> ids;
  for (const auto& e : in["Entries"]) {
    std::string id = str(e, "Id");
    if (!valid_batch_id(id))
      throw SqsError(400, "AWS.SimpleQueueService.InvalidBatchEntryId", "InvalidBatchEntryId",
                     "A batch entry id can only contain alphanumeric characters, hyphens and "
                     "underscores. It can be at most 80 letters long.");
    if (!ids.insert(id).second)
      throw SqsError(400, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                     "BatchEntryIdsNotDistinct", "Id " + id + " repeated.");
  }
}

json Service::Impl::failed(const std::string& id, const SqsError& e) {
  return {{"Id", id}, {"SenderFault", e.sender}, {"Code", e.code}, {"Message", e.what()}};
}

json Service::Impl::send_message_batch(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  check_entries(in, "SendMessageBatch");
  std::size_t total = 0;
  for (const auto& e : in["Entries"]) total += str(e, "MessageBody").size();
  if (total > kMaxMessageSize)
    throw SqsError(400, "AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong",
                   fmt::format("Batch requests cannot be longer than {} bytes. You have sent {} "
                               "bytes.",
                               kMaxMessageSize, total));
  json successful = json::array(), failures = json::array();
  std::lock_guard<std::mutex> lock(mutex);
  try {
    auto config = config_of(queue);
    // The entries that pass go in one send: one transaction, one commit. A
    // per-message delay splits them by delay.
    struct Entry {
      std::string id, body;
      AttributeMap attributes;
      std::optional<q::Millis> delay;
      q::OutgoingMessage message;
    };
    std::vector<Entry> entries;
    for (const auto& e : in["Entries"]) {
      Entry entry;
      entry.id = str(e, "Id");
      try {
        entry.message = outgoing(e, config, queue, entry.attributes, entry.delay);
        entry.body = entry.message.body;
        entries.push_back(std::move(entry));
      } catch (const SqsError& err) {
        failures.push_back(failed(entry.id, err));
      }
    }
    std::map<std::optional<q::Millis>, std::vector<std::size_t>> by_delay;
    for (std::size_t i = 0; i < entries.size(); ++i) by_delay[entries[i].delay].push_back(i);
    std::vector<json> replies(entries.size());
    for (const auto& [delay, indexes] : by_delay) {
      std::vector<q::OutgoingMessage> messages;
      for (auto i : indexes) messages.push_back(entries[i].message);
      q::SendOptions options;
      options.delay = delay;
      auto sent = broker->send(queue, std::move(messages), options);
      for (std::size_t k = 0; k < indexes.size(); ++k) {
        auto& e = entries[indexes[k]];
        replies[indexes[k]] = sent_reply(sent[k], e.body, e.attributes, config.fifo);
        replies[indexes[k]]["Id"] = e.id;
      }
    }
    for (auto& r : replies) successful.push_back(r);
    if (!entries.empty()) bump();
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
  json out = json::object();
  out["Successful"] = successful;
  out["Failed"] = failures;
  return out;
}

json Service::Impl::message_json(const q::Message& m, const std::vector<std::string>& system,
                                 const std::vector<std::string>& attribute_names) {
  // A body q send stored as bytes SQS cannot carry is given as text with
  // U+FFFD in their place, and its MD5 is that text's, which the SDKs check.
  std::string body = sqs_text(m.body);
  json out = {{"MessageId", m.id},
              {"ReceiptHandle", m.receipt},
              {"MD5OfBody", hex(md5(body))},
              {"Body", std::move(body)}};
  json a = json::object();
  auto put = [&](const char* name, const std::string& value) {
    if (wanted(system, name)) a[name] = value;
  };
  put("SenderId", kAccount);
  put("SentTimestamp", std::to_string(m.sent_at));
  put("ApproximateReceiveCount", std::to_string(m.receive_count));
  put("ApproximateFirstReceiveTimestamp",
      std::to_string(m.first_received_at.value_or(m.last_received_at.value_or(m.sent_at))));
  if (!m.group.empty()) {
    put("MessageGroupId", m.group);
    put("SequenceNumber", sequence_number(m.id));
  }
  if (!m.dedup_id.empty()) put("MessageDeduplicationId", m.dedup_id);
  if (!a.empty()) out["Attributes"] = a;
  AttributeMap all = from_q(m.attributes), chosen;
  for (const auto& [name, attr] : all)
    if (wanted(attribute_names, name)) chosen[name] = attr;
  if (!chosen.empty()) {
    out["MessageAttributes"] = attributes_json(chosen);
    out["MD5OfMessageAttributes"] = attributes_md5(chosen);
  }
  return out;
}

json Service::Impl::receive_message(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  q::ReceiveOptions options;
  options.max_messages = has(in, "MaxNumberOfMessages")
                             ? static_cast<std::uint32_t>(
                                   integer(in["MaxNumberOfMessages"], "MaxNumberOfMessages", 1, 10))
                             : 1;
  if (has(in, "VisibilityTimeout"))
    options.visibility_timeout =
        integer(in["VisibilityTimeout"], "VisibilityTimeout", 0, 43200) * q::kSecond;
  std::optional<q::Millis> wait;
  if (has(in, "WaitTimeSeconds"))
    wait = integer(in["WaitTimeSeconds"], "WaitTimeSeconds", 0, 20) * q::kSecond;
  auto system = names(in, "AttributeNames");
  for (const auto& n : names(in, "MessageSystemAttributeNames")) system.push_back(n);
  auto attribute_names = names(in, "MessageAttributeNames");

  std::unique_lock<std::mutex> lock(mutex);
  std::vector<q::Message> got;
  try {
    if (!wait) {
      json doc = settings();
      wait = (doc.contains(queue) ? doc[queue].value("wait", 0) : 0) * q::kSecond;
    }
    q::Millis deadline = clock.now() + *wait;
    for (;;) {
      std::uint64_t seen = generation;
      got = broker->receive(queue, options);
      q::Millis now = clock.now();
      if (!got.empty() || now >= deadline || stopping) break;
      // Woken by a send through this server at once; by another process's
      // (q send on the file, another q serve on the cluster) through the
      // watch thread; delayed messages and expiring leases by the clock.
      q::Millis next = broker->next_delivery(queue, false);
      q::Millis until = std::min({deadline, next > now ? next : now + 50, now + q::kSecond});
      changed.wait_for(lock, std::chrono::milliseconds(until - now),
                       [&] { return generation != seen || stopping; });
    }
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
  json messages = json::array();
  for (const auto& m : got) messages.push_back(message_json(m, system, attribute_names));
  json out = json::object();
  if (!messages.empty()) out["Messages"] = messages;
  return out;
}

// SQS on a stale handle: a standard queue accepts the delete and keeps the
// message (it was received again); a FIFO queue refuses it.
json Service::Impl::delete_batch(const std::string& queue,
                                 const std::vector<std::pair<std::string, std::string>>& entries,
                                 bool& any_error, json& failures) {
  PendingDelete pending;
  pending.queue = queue;
  for (const auto& e : entries) pending.receipts.push_back(e.second);
  try {
    bool fifo = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      fifo = config_of(queue).fifo;
    }
    if (group_commit) {
      deletes.submit(pending, mutex, [this](const auto& batch) { commit_deletes(batch); });
    } else {
      deletes.submit_alone(pending, mutex, [this](const auto& batch) { commit_deletes(batch); });
    }
    const auto& results = pending.results;
    json ok = json::array();
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      if (r.outcome == q::ReceiptOutcome::Malformed) {
        any_error = true;
        failures.push_back(failed(entries[i].first, receipt_invalid(r.receipt, r.detail)));
      } else if (r.outcome == q::ReceiptOutcome::Stale && fifo) {
        any_error = true;
        failures.push_back(failed(entries[i].first, receipt_expired(r.receipt)));
      } else {
        ok.push_back({{"Id", entries[i].first}});
      }
    }
    return ok;
  } catch (const q::Error& e) {
    throw from_q(e, queue);
  }
}

// The deletes of one queue go in one ack: one transaction, one commit, each
// receipt with its own outcome. Should the rules refuse the ack as a whole
// (the queue deleted meanwhile), each request is tried alone.
void Service::Impl::commit_deletes(const std::vector<PendingDelete*>& batch) {
  std::map<std::string, std::vector<PendingDelete*>> groups;
  for (PendingDelete* p : batch) groups[p->queue].push_back(p);
  auto ack = [&](const std::vector<PendingDelete*>& items) {
    std::vector<std::string> receipts;
    for (const PendingDelete* p : items)
      receipts.insert(receipts.end(), p->receipts.begin(), p->receipts.end());
    auto results = broker->ack(items.front()->queue, receipts);
    ++commits;
    std::size_t at = 0;
    for (PendingDelete* p : items) {
      p->results.assign(results.begin() + at, results.begin() + at + p->receipts.size());
      at += p->receipts.size();
      p->done = true;
    }
  };
  commit_each_group<q::Error>(
      groups, ack, [&](const q::Error& e) { return refused_before_storing(e, all_or_nothing); });
}

SqsError Service::Impl::receipt_invalid(const std::string& receipt, const std::string& detail) {
  return SqsError(404, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid",
                  fmt::format("The input receipt handle \"{}\" is not a valid receipt handle{}",
                              receipt, detail.empty() ? "." : ": " + detail));
}

SqsError Service::Impl::receipt_expired(const std::string& receipt) {
  return invalid_parameter(
      fmt::format("Value {} for parameter ReceiptHandle is invalid. Reason: The receipt handle has "
                  "expired.",
                  receipt));
}

json Service::Impl::delete_message(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  std::string receipt = required(in, "ReceiptHandle");
  bool any = false;
  json failures = json::array();
  delete_batch(queue, {{"x", receipt}}, any, failures);
  if (any) {
    const auto& f = failures[0];
    if (f["Code"] == "ReceiptHandleIsInvalid") throw receipt_invalid(receipt, "");
    throw receipt_expired(receipt);
  }
  return json::object();
}

json Service::Impl::delete_message_batch(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  check_entries(in, "DeleteMessageBatch");
  std::vector<std::pair<std::string, std::string>> entries;
  json failures = json::array();
  for (const auto& e : in["Entries"]) {
    if (!has(e, "ReceiptHandle"))
      failures.push_back(failed(str(e, "Id"), missing_parameter("ReceiptHandle")));
    else
      entries.emplace_back(str(e, "Id"), str(e, "ReceiptHandle"));
  }
  bool any = false;
  json ok = entries.empty() ? json::array() : delete_batch(queue, entries, any, failures);
  return {{"Successful", ok}, {"Failed", failures}};
}

// ChangeMessageVisibility: 0 makes it visible now (q nack), more extends
// the lease from now (q extend), the receipt staying good either way for
// SQS clients... except after 0, where the message is up for grabs.
void Service::Impl::change_visibility(const std::string& queue, const std::string& receipt,
                                      q::Millis timeout) {
  try {
    if (timeout == 0) {
      broker->nack(queue, receipt, {});
      bump();
    } else {
      broker->extend(queue, receipt, timeout);
    }
  } catch (const q::Error& e) {
    if (e.kind() == q::ErrorKind::Stale)
      throw SqsError(400, "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight",
                     fmt::format("Value {} for parameter ReceiptHandle is invalid. Reason: "
                                 "Message does not exist or is not available for visibility "
                                 "timeout change.",
                                 receipt));
    if (e.kind() == q::ErrorKind::InvalidData) throw receipt_invalid(receipt, e.what());
    throw from_q(e, queue);
  }
}

json Service::Impl::change_message_visibility(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  std::string receipt = required(in, "ReceiptHandle");
  if (!has(in, "VisibilityTimeout")) throw missing_parameter("VisibilityTimeout");
  q::Millis timeout = integer(in["VisibilityTimeout"], "VisibilityTimeout", 0, 43200) * q::kSecond;
  std::lock_guard<std::mutex> lock(mutex);
  change_visibility(queue, receipt, timeout);
  return json::object();
}

json Service::Impl::change_message_visibility_batch(const json& in) {
  std::string queue = queue_from_url(str(in, "QueueUrl"));
  check_entries(in, "ChangeMessageVisibilityBatch");
  json ok = json::array(), failures = json::array();
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& e : in["Entries"]) {
    std::string id = str(e, "Id");
    try {
      std::string receipt = required(e, "ReceiptHandle");
      // An entry without a timeout fails alone, as ChangeMessageVisibility
      // does; taking it as 0 released the message at once.
      if (!has(e, "VisibilityTimeout")) throw missing_parameter("VisibilityTimeout");
      q::Millis timeout =
          integer(e["VisibilityTimeout"], "VisibilityTimeout", 0, 43200) * q::kSecond;
      change_visibility(queue, receipt, timeout);
      ok.push_back({{"Id", id}});
    } catch (const SqsError& err) {
      if (err.code == "AWS.SimpleQueueService.NonExistentQueue") throw;
      failures.push_back(failed(id, err));
    }
  }
  return {{"Successful", ok}, {"Failed", failures}};
}

}  // namespace serve
