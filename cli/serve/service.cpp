#include "service.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "crypto.hpp"
#include "error.hpp"
#include "sqs_error.hpp"

namespace serve {

using nlohmann::json;

namespace {

// SQS's limits
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html).
constexpr std::uint32_t kMaxMessageSize = 256 * 1024;
constexpr std::size_t kMaxBatch = 10;
constexpr const char* kTypePrefix = "AWS.DataType.";  // SQS reserves "AWS." names

std::string str(const json& in, const char* key) {
  auto it = in.find(key);
  if (it == in.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

bool has(const json& in, const char* key) { return in.contains(key) && !in[key].is_null(); }

std::string required(const json& in, const char* key) {
  if (!has(in, key)) throw missing_parameter(key);
  return str(in, key);
}

// A number given as a JSON number or (query protocol, attributes) as text.
std::int64_t integer(const json& v, const std::string& name, std::int64_t lo, std::int64_t hi,
                     bool attribute = false) {
  std::int64_t n = 0;
  bool ok = false;
  if (v.is_number_integer()) {
    n = v.get<std::int64_t>();
    ok = true;
  } else if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    ok = !s.empty() && s.size() < 19 && std::all_of(s.begin() + (s[0] == '-'), s.end(), [](char c) {
      return c >= '0' && c <= '9';
    }) && s != "-";
    if (ok) n = std::stoll(s);
  }
  if (!ok || n < lo || n > hi) {
    std::string message = fmt::format(
        "Value {} for parameter {} is invalid. Reason: must be an "
        "integer from {} to {}.",
        v.is_string() ? v.get<std::string>() : v.dump(), name, lo, hi);
    throw attribute ? invalid_attribute(message) : invalid_parameter(message);
  }
  return n;
}

std::string queue_from_url(const std::string& url) {
  if (url.empty()) throw missing_parameter("QueueUrl");
  std::string path = url;
  auto scheme = path.find("://");
  if (scheme != std::string::npos) {
    auto slash = path.find('/', scheme + 3);
    path = slash == std::string::npos ? "" : path.substr(slash);
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == kSettingsQueue)
    throw SqsError(400, "InvalidAddress", "InvalidAddress",
                   fmt::format("The address {} is not valid for this endpoint.", url));
  return name;
}

std::string queue_from_arn(const std::string& arn, const char* field) {
  // arn:aws:sqs:REGION:ACCOUNT:QUEUE
  if (arn.compare(0, 12, "arn:aws:sqs:") != 0 || std::count(arn.begin(), arn.end(), ':') != 5)
    throw invalid_parameter(
        fmt::format("Value {} for parameter {} is invalid. Reason: not an "
                    "arn:aws:sqs:REGION:ACCOUNT:QUEUE ARN.",
                    arn, field));
  return arn.substr(arn.rfind(':') + 1);
}

bool valid_batch_id(const std::string& id) {
  return !id.empty() && id.size() <= 80 && std::all_of(id.begin(), id.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_';
  });
}

// SQS accepts #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF in UTF-8.
bool valid_body(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    std::uint32_t cp;
    std::size_t n;
    if (c < 0x80) {
      cp = c, n = 1;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F, n = 2;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F, n = 3;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07, n = 4;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    bool ok = cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
              (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
    if (!ok || (n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000))
      return false;
    i += n;
  }
  return true;
}

struct Attribute {
  std::string type, value;  // value: StringValue, or BinaryValue's bytes (decoded)
};
using AttributeMap = std::map<std::string, Attribute>;  // sorted by name, as the MD5 wants

void put_length(std::string& out, std::string_view s) {
  auto n = static_cast<std::uint32_t>(s.size());
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xFF);
  out += s;
}

// MD5OfMessageAttributes as SQS computes it: per attribute in name order, the
// name, the data type (each with a 4-byte big-endian length), 1 for string
// (and number) or 2 for binary, then the value with its length.
std::string attributes_md5(const AttributeMap& attributes) {
  std::string buf;
  for (const auto& [name, a] : attributes) {
    put_length(buf, name);
    put_length(buf, a.type);
    bool binary = a.type.compare(0, 6, "Binary") == 0;
    buf += static_cast<char>(binary ? 2 : 1);
    put_length(buf, a.value);
  }
  return hex(md5(buf));
}

AttributeMap read_message_attributes(const json& in) {
  AttributeMap out;
  auto it = in.find("MessageAttributes");
  if (it == in.end() || it->is_null()) return out;
  if (!it->is_object()) throw invalid_parameter("MessageAttributes must be a map");
  if (it->size() > 10)
    throw invalid_parameter(fmt::format(
        "Number of message attributes [{}] exceeds the allowed maximum [10].", it->size()));
  for (const auto& [name, v] : it->items()) {
    if (name.empty() || name.size() > 256 || name.compare(0, 4, "AWS.") == 0 ||
        name.compare(0, 7, "Amazon.") == 0)
      throw invalid_parameter(fmt::format("Message attribute name '{}' is invalid.", name));
    std::string type = str(v, "DataType");
    if (type.empty())
      throw invalid_parameter(
          fmt::format("The message attribute '{}' must contain non-empty message attribute "
                      "type.",
                      name));
    Attribute a{type, {}};
    if (type.compare(0, 6, "Binary") == 0) {
      if (!base64_decode(str(v, "BinaryValue"), a.value) || !has(v, "BinaryValue"))
        throw invalid_parameter(fmt::format(
            "The message attribute '{}' with type 'Binary' must use field 'Binary'.", name));
    } else if (type.compare(0, 6, "String") == 0 || type.compare(0, 6, "Number") == 0) {
      if (!has(v, "StringValue"))
        throw invalid_parameter(fmt::format(
            "The message attribute '{}' with type '{}' must use field 'String'.", name, type));
      a.value = str(v, "StringValue");
    } else {
      throw invalid_parameter(
          fmt::format("The type of message attribute '{}' is invalid: {}", name, type));
    }
    out[name] = a;
  }
  return out;
}

// SQS attributes as q attributes: a String one as NAME=VALUE (what `q send
// --attr` makes and `q show` prints); other types also keep
// AWS.DataType.NAME=TYPE, binary values in base64.
q::Attributes to_q(const AttributeMap& attributes) {
  q::Attributes out;
  for (const auto& [name, a] : attributes) {
    bool binary = a.type.compare(0, 6, "Binary") == 0;
    out.emplace_back(name, binary ? base64_encode(a.value) : a.value);
    if (a.type != "String") out.emplace_back(kTypePrefix + name, a.type);
  }
  return out;
}

AttributeMap from_q(const q::Attributes& attributes) {
  std::map<std::string, std::string> types;
  for (const auto& [k, v] : attributes)
    if (k.compare(0, 13, kTypePrefix) == 0) types[k.substr(13)] = v;
  AttributeMap out;
  for (const auto& [k, v] : attributes) {
    if (k.compare(0, 13, kTypePrefix) == 0) continue;
    Attribute a{types.count(k) ? types[k] : "String", v};
    if (a.type.compare(0, 6, "Binary") == 0 && !base64_decode(v, a.value))
      a.type = "String", a.value = v;
    out[k] = a;
  }
  return out;
}

json attributes_json(const AttributeMap& attributes) {
  json out = json::object();
  for (const auto& [name, a] : attributes) {
    json v = {{"DataType", a.type}};
    if (a.type.compare(0, 6, "Binary") == 0)
      v["BinaryValue"] = base64_encode(a.value);
    else
      v["StringValue"] = a.value;
    out[name] = v;
  }
  return out;
}

std::size_t attributes_size(const AttributeMap& attributes) {
  std::size_t n = 0;
  for (const auto& [name, a] : attributes) n += name.size() + a.type.size() + a.value.size();
  return n;
}

bool wanted(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names) {
    if (n == "All" || n == ".*" || n == name) return true;
    if (n.size() > 2 && n.compare(n.size() - 2, 2, ".*") == 0 &&
        name.compare(0, n.size() - 1, n, 0, n.size() - 1) == 0)
      return true;
  }
  return false;
}

std::vector<std::string> names(const json& in, const char* key) {
  std::vector<std::string> out;
  if (has(in, key) && in[key].is_array())
    for (const auto& v : in[key]) out.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

std::string seconds(q::Millis ms) { return std::to_string(ms / 1000); }

SqsError from_q(const q::Error& e, const std::string& queue) {
  switch (e.kind()) {
    case q::ErrorKind::NotFound: return no_such_queue(queue);
    case q::ErrorKind::Full: return SqsError(403, "OverLimit", "OverLimit", e.what());
    case q::ErrorKind::Busy:
      return SqsError(503, "ServiceUnavailable", "ServiceUnavailable", e.what(), false);
    case q::ErrorKind::Io:
    case q::ErrorKind::Permission:
    case q::ErrorKind::ReadOnly:
      return SqsError(500, "InternalError", "InternalError", e.what(), false);
    case q::ErrorKind::Stale:
    case q::ErrorKind::Usage:
    case q::ErrorKind::InvalidData: break;
  }
  return invalid_parameter(e.what());
}

}  // namespace

struct Service::Impl {
  std::unique_ptr<q::Broker> broker;
  const q::Clock& clock;
  std::mutex mutex;  // one broker call at a time
  std::condition_variable changed;
  std::uint64_t generation = 0;
  bool stopping = false;
  std::deque<MoveTask> tasks;  // the last move tasks, newest first
  std::mt19937_64 random{std::random_device{}()};

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

  // The settings doc: {"QUEUE": {"dlq": NAME, "wait": SECONDS}, ...}; the
  // newest message of kSettingsQueue (called with the mutex held).
  json settings() {
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
  void save_settings(const json& doc) {
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

  std::string url(const RequestInfo& info, const std::string& queue) const {
    return fmt::format("{}://{}/{}/{}", info.tls ? "https" : "http", info.host, kAccount, queue);
  }
  static std::string arn(const RequestInfo& info, const std::string& queue) {
    return fmt::format("arn:aws:sqs:{}:{}:{}", info.region.empty() ? "us-east-1" : info.region,
                       kAccount, queue);
  }

  void bump() {
    ++generation;
    changed.notify_all();
  }

  // CreateQueue and SetQueueAttributes: SQS attributes -> q's config and the settings doc.
  void read_queue_attributes(const json& attributes, const std::string& queue, bool creating,
                             q::ConfigChange& change, json& extra) {
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

  void check_dlq_exists(const json& extra) {
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

  void merge_settings(const std::string& queue, const json& extra) {
    if (extra.empty()) return;
    json doc = settings();
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
    save_settings(doc);
  }

  json create_queue(const json& in, const RequestInfo& info) {
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

  q::QueueStats stats_of(const std::string& queue) {
    auto all = broker->stats(queue);
    if (all.empty()) throw no_such_queue(queue);
    return all[0];
  }

  json get_queue_url(const json& in, const RequestInfo& info) {
    std::string queue = required(in, "QueueName");
    if (queue == kSettingsQueue) throw no_such_queue(queue);
    locked(queue, [&](q::Broker&) { return stats_of(queue); });
    return {{"QueueUrl", url(info, queue)}};
  }

  json list_queues(const json& in, const RequestInfo& info) {
    std::string prefix = str(in, "QueueNamePrefix");
    std::size_t max =
        has(in, "MaxResults") ? integer(in["MaxResults"], "MaxResults", 1, 1000) : 1000;
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

  json get_queue_attributes(const json& in, const RequestInfo& info) {
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

  json set_queue_attributes(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    q::ConfigChange change;
    json extra = json::object();
    read_queue_attributes(in.value("Attributes", json()), queue, false, change, extra);
    std::lock_guard<std::mutex> lock(mutex);
    try {
      stats_of(queue);
      check_dlq_exists(extra);
      if (!change.empty()) broker->configure(queue, change);
      merge_settings(queue, extra);
    } catch (const q::Error& e) {
      throw from_q(e, queue);
    }
    bump();
    return json::object();
  }

  json delete_queue(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    std::lock_guard<std::mutex> lock(mutex);
    try {
      broker->delete_queue(queue);
      json doc = settings();
      if (doc.contains(queue)) {
        doc.erase(queue);
        save_settings(doc);
      }
    } catch (const q::Error& e) {
      throw from_q(e, queue);
    }
    return json::object();
  }

  json purge_queue(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    locked(queue, [&](q::Broker& b) { return b.purge(queue); });
    return json::object();
  }

  // One entry of SendMessage(Batch), checked; the error names the entry's fault.
  q::OutgoingMessage outgoing(const json& in, const q::QueueConfig& config,
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

  json sent_reply(const q::SendResult& r, const std::string& body, const AttributeMap& attributes,
                  bool fifo) {
    json out = {{"MessageId", r.id}, {"MD5OfMessageBody", hex(md5(body))}};
    if (!attributes.empty()) out["MD5OfMessageAttributes"] = attributes_md5(attributes);
    if (fifo) out["SequenceNumber"] = sequence_number(r.id);
    return out;
  }

  // FIFO replies carry a SequenceNumber: q's ids grow with each send.
  static std::string sequence_number(const std::string& id) {
    std::uint64_t n = 0;
    for (char c : id) n = n * 37 + static_cast<unsigned char>(c);
    return std::to_string(n);
  }

  json send_message(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    std::lock_guard<std::mutex> lock(mutex);
    try {
      auto config = stats_of(queue).config;
      AttributeMap attributes;
      std::optional<q::Millis> delay;
      auto m = outgoing(in, config, queue, attributes, delay);
      std::string body = m.body;
      q::SendOptions options;
      options.delay = delay;
      auto sent = broker->send(queue, {std::move(m)}, options);
      bump();
      return sent_reply(sent[0], body, attributes, config.fifo);
    } catch (const q::Error& e) {
      throw from_q(e, queue);
    }
  }

  static void check_entries(const json& in, const char* action) {
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

  static json failed(const std::string& id, const SqsError& e) {
    return {{"Id", id}, {"SenderFault", e.sender}, {"Code", e.code}, {"Message", e.what()}};
  }

  json send_message_batch(const json& in) {
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
      auto config = stats_of(queue).config;
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

  json message_json(const q::Message& m, const std::vector<std::string>& system,
                    const std::vector<std::string>& attribute_names) {
    json out = {{"MessageId", m.id},
                {"ReceiptHandle", m.receipt},
                {"MD5OfBody", hex(md5(m.body))},
                {"Body", m.body}};
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

  json receive_message(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    q::ReceiveOptions options;
    options.max_messages = has(in, "MaxNumberOfMessages")
                               ? static_cast<std::uint32_t>(integer(in["MaxNumberOfMessages"],
                                                                    "MaxNumberOfMessages", 1, 10))
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
  json delete_batch(const std::string& queue,
                    const std::vector<std::pair<std::string, std::string>>& entries,
                    bool& any_error, json& failures) {
    std::vector<std::string> receipts;
    for (const auto& e : entries) receipts.push_back(e.second);
    std::lock_guard<std::mutex> lock(mutex);
    try {
      auto config = stats_of(queue).config;
      auto results = broker->ack(queue, receipts);
      json ok = json::array();
      for (std::size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        if (r.outcome == q::ReceiptOutcome::Malformed) {
          any_error = true;
          failures.push_back(failed(entries[i].first, receipt_invalid(r.receipt, r.detail)));
        } else if (r.outcome == q::ReceiptOutcome::Stale && config.fifo) {
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

  static SqsError receipt_invalid(const std::string& receipt, const std::string& detail) {
    return SqsError(404, "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid",
                    fmt::format("The input receipt handle \"{}\" is not a valid receipt handle{}",
                                receipt, detail.empty() ? "." : ": " + detail));
  }
  static SqsError receipt_expired(const std::string& receipt) {
    return invalid_parameter(fmt::format(
        "Value {} for parameter ReceiptHandle is invalid. Reason: The receipt handle has "
        "expired.",
        receipt));
  }

  json delete_message(const json& in) {
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

  json delete_message_batch(const json& in) {
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
  void change_visibility(const std::string& queue, const std::string& receipt, q::Millis timeout) {
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

  json change_message_visibility(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    std::string receipt = required(in, "ReceiptHandle");
    if (!has(in, "VisibilityTimeout")) throw missing_parameter("VisibilityTimeout");
    q::Millis timeout =
        integer(in["VisibilityTimeout"], "VisibilityTimeout", 0, 43200) * q::kSecond;
    std::lock_guard<std::mutex> lock(mutex);
    change_visibility(queue, receipt, timeout);
    return json::object();
  }

  json change_message_visibility_batch(const json& in) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    check_entries(in, "ChangeMessageVisibilityBatch");
    json ok = json::array(), failures = json::array();
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& e : in["Entries"]) {
      std::string id = str(e, "Id");
      try {
        std::string receipt = required(e, "ReceiptHandle");
        q::Millis timeout =
            has(e, "VisibilityTimeout")
                ? integer(e["VisibilityTimeout"], "VisibilityTimeout", 0, 43200) * q::kSecond
                : 0;
        change_visibility(queue, receipt, timeout);
        ok.push_back({{"Id", id}});
      } catch (const SqsError& err) {
        if (err.code == "AWS.SimpleQueueService.NonExistentQueue") throw;
        failures.push_back(failed(id, err));
      }
    }
    return {{"Successful", ok}, {"Failed", failures}};
  }

  json list_dead_letter_source_queues(const json& in, const RequestInfo& info) {
    std::string queue = queue_from_url(str(in, "QueueUrl"));
    std::lock_guard<std::mutex> lock(mutex);
    json urls = json::array();
    try {
      stats_of(queue);
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
  json start_message_move_task(const json& in, const RequestInfo& info) {
    std::string source_arn = required(in, "SourceArn");
    std::string dlq = queue_from_arn(source_arn, "SourceArn");
    std::string destination = has(in, "DestinationArn")
                                  ? queue_from_arn(str(in, "DestinationArn"), "DestinationArn")
                                  : "";
    double rate = has(in, "MaxNumberOfMessagesPerSecond")
                      ? static_cast<double>(integer(in["MaxNumberOfMessagesPerSecond"],
                                                    "MaxNumberOfMessagesPerSecond", 1, 500))
                      : 0;
    std::lock_guard<std::mutex> lock(mutex);
    MoveTask task;
    try {
      stats_of(dlq);
      if (!destination.empty()) stats_of(destination);
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

  json list_message_move_tasks(const json& in) {
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

  json cancel_message_move_task(const json& in) {
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
};

Service::Service(std::unique_ptr<q::Broker> broker, const q::Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(broker), clock)), clock_(clock) {
  // Creating the settings queue publishes a new file at once: until its first
  // commit a new file is staged, and other creators in its directory wait.
  q::ConfigChange change;
  change.max_receives = 0;
  change.retention = 365 * q::kDay;
  impl_->broker->create_queue(kSettingsQueue, change);
}
Service::~Service() = default;

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
