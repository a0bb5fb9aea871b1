#include "cli/serve/wire.hpp"

#include <algorithm>
#include <cctype>

#include "cli/serve/service_input.hpp"
#include "libq/location.hpp"

namespace serve {

using nlohmann::json;

namespace {

std::string escape(const std::string& text) {
  // XML 1.0 has no way to write most control characters or bytes that are
  // not UTF-8: they are U+FFFD, so a client can always parse the reply.
  const std::string s = sqs_text(text);
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      // Kept through XML parsers that normalise line ends.
      case '\r': out += "&#xD;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string element(const std::string& name, const std::string& value) {
  return "<" + name + ">" + escape(value) + "</" + name + ">";
}

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Name.N.rest -> (N, rest) when key starts with "Name.".
bool indexed(const std::string& key, const std::string& name, int& n, std::string& rest) {
  if (key.compare(0, name.size() + 1, name + ".") != 0) return false;
  std::size_t start = name.size() + 1, dot = key.find('.', start);
  std::string digits =
      key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
  if (digits.empty() || digits.size() > 4 ||
      !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
    return false;
  n = std::stoi(digits);
  rest = dot == std::string::npos ? "" : key.substr(dot + 1);
  return true;
}

// The parameters of one request or batch entry (given with their prefix removed).
json params(const std::map<std::string, std::string>& form) {
  json out = json::object();
  std::map<int, std::map<std::string, std::string>> attributes, message_attributes, entries,
      system_attributes;
  std::map<int, std::string> attribute_names, message_attribute_names, system_names;
  for (const auto& [key, value] : form) {
    int n;
    std::string rest;
    if (indexed(key, "Attribute", n, rest)) {
      attributes[n][rest] = value;
    } else if (indexed(key, "MessageAttribute", n, rest)) {
      message_attributes[n][rest] = value;
    } else if (indexed(key, "MessageSystemAttribute", n, rest)) {
      system_attributes[n][rest] = value;
    } else if (indexed(key, "AttributeName", n, rest) && rest.empty()) {
      attribute_names[n] = value;
    } else if (indexed(key, "MessageAttributeName", n, rest) && rest.empty()) {
      message_attribute_names[n] = value;
    } else if (indexed(key, "MessageSystemAttributeName", n, rest) && rest.empty()) {
      system_names[n] = value;
    } else if (key.find('.') == std::string::npos) {
      out[key] = value;
    } else {
      auto dot = key.find('.');
      std::string head = key.substr(0, dot);
      if (head.size() > 12 && head.compare(head.size() - 12, 12, "RequestEntry") == 0 &&
          indexed(key, head, n, rest))
        entries[n][rest] = value;
    }
  }
  if (!attributes.empty()) {
    json a = json::object();
    for (auto& [n, kv] : attributes)
      if (kv.count("Name")) a[kv["Name"]] = kv["Value"];
    out["Attributes"] = a;
  }
  auto typed = [](std::map<int, std::map<std::string, std::string>>& from) {
    json a = json::object();
    for (auto& [n, kv] : from) {
      if (!kv.count("Name")) continue;
      json v = json::object();
      for (const char* f : {"StringValue", "BinaryValue", "DataType"})
        if (kv.count(std::string("Value.") + f)) v[f] = kv[std::string("Value.") + f];
      a[kv["Name"]] = v;
    }
    return a;
  };
  if (!message_attributes.empty()) out["MessageAttributes"] = typed(message_attributes);
  if (!system_attributes.empty()) out["MessageSystemAttributes"] = typed(system_attributes);
  auto list = [](const std::map<int, std::string>& from) {
    json a = json::array();
    for (const auto& [n, v] : from) a.push_back(v);
    return a;
  };
  if (!attribute_names.empty()) out["AttributeNames"] = list(attribute_names);
  if (!message_attribute_names.empty())
    out["MessageAttributeNames"] = list(message_attribute_names);
  if (!system_names.empty()) out["MessageSystemAttributeNames"] = list(system_names);
  if (!entries.empty()) {
    json a = json::array();
    for (auto& [n, kv] : entries) a.push_back(params(kv));
    out["Entries"] = a;
  }
  return out;
}

std::string attributes_xml(const json& attributes) {
  std::string out;
  for (const auto& [name, value] : attributes.items())
    out += "<Attribute>" + element("Name", name) + element("Value", text(value)) + "</Attribute>";
  return out;
}

std::string message_xml(const json& m) {
  std::string out = "<Message>";
  for (const char* f : {"MessageId", "ReceiptHandle", "MD5OfBody", "Body"})
    if (m.contains(f)) out += element(f, text(m[f]));
  if (m.contains("Attributes")) out += attributes_xml(m["Attributes"]);
  if (m.contains("MD5OfMessageAttributes"))
    out += element("MD5OfMessageAttributes", text(m["MD5OfMessageAttributes"]));
  if (m.contains("MessageAttributes"))
    for (const auto& [name, v] : m["MessageAttributes"].items()) {
      out += "<MessageAttribute>" + element("Name", name) + "<Value>";
      for (const char* f : {"StringValue", "BinaryValue", "DataType"})
        if (v.contains(f)) out += element(f, text(v[f]));
      out += "</Value></MessageAttribute>";
    }
  return out + "</Message>";
}

std::string entries_xml(const json& out, const std::string& ok_name) {
  std::string s;
  for (const auto& e : out.value("Successful", json::array())) {
    s += "<" + ok_name + ">";
    for (const auto& [k, v] : e.items()) s += element(k, text(v));
    s += "</" + ok_name + ">";
  }
  for (const auto& e : out.value("Failed", json::array())) {
    s += "<BatchResultErrorEntry>";
    for (const auto& [k, v] : e.items()) s += element(k, text(v));
    s += "</BatchResultErrorEntry>";
  }
  return s;
}

}  // namespace

std::map<std::string, std::string> parse_form(const std::string& body) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < body.size()) {
    auto end = body.find('&', start);
    if (end == std::string::npos) end = body.size();
    std::string item = body.substr(start, end - start);
    auto eq = item.find('=');
    if (!item.empty())
      out[q::percent_decode(item.substr(0, eq), true)] =
          eq == std::string::npos ? "" : q::percent_decode(item.substr(eq + 1), true);
    start = end + 1;
  }
  return out;
}

json query_to_json(const std::string& /*action*/, const std::map<std::string, std::string>& form) {
  std::map<std::string, std::string> rest;
  for (const auto& [k, v] : form)
    if (k != "Action" && k != "Version") rest[k] = v;
  return params(rest);
}

std::string xml_reply(const std::string& action, const json& out, const std::string& request_id) {
  std::string result;
  if (action == "CreateQueue" || action == "GetQueueUrl") {
    result = element("QueueUrl", text(out["QueueUrl"]));
  } else if (action == "ListQueues") {
    for (const auto& u : out.value("QueueUrls", json::array()))
      result += element("QueueUrl", text(u));
    if (out.contains("NextToken")) result += element("NextToken", text(out["NextToken"]));
  } else if (action == "ListDeadLetterSourceQueues") {
    for (const auto& u : out.value("queueUrls", json::array()))
      result += element("QueueUrl", text(u));
  } else if (action == "GetQueueAttributes") {
    result = attributes_xml(out.value("Attributes", json::object()));
  } else if (action == "SendMessage") {
    for (const auto& [k, v] : out.items()) result += element(k, text(v));
  } else if (action == "SendMessageBatch") {
    result = entries_xml(out, "SendMessageBatchResultEntry");
  } else if (action == "DeleteMessageBatch") {
    result = entries_xml(out, "DeleteMessageBatchResultEntry");
  } else if (action == "ChangeMessageVisibilityBatch") {
    result = entries_xml(out, "ChangeMessageVisibilityBatchResultEntry");
  } else if (action == "ReceiveMessage") {
    for (const auto& m : out.value("Messages", json::array())) result += message_xml(m);
  } else if (action == "StartMessageMoveTask") {
    result = element("TaskHandle", text(out["TaskHandle"]));
  } else if (action == "ListMessageMoveTasks") {
    for (const auto& r : out.value("Results", json::array())) {
      result += "<ListMessageMoveTasksResultEntry>";
      for (const auto& [k, v] : r.items()) result += element(k, text(v));
      result += "</ListMessageMoveTasksResultEntry>";
    }
  } else if (action == "CancelMessageMoveTask") {
    for (const auto& [k, v] : out.items()) result += element(k, text(v));
  }
  std::string ns = "http://queue.amazonaws.com/doc/2012-11-05/";
  std::string body = "<?xml version=\"1.0\"?><" + action + "Response xmlns=\"" + ns + "\">";
  if (!result.empty() || action != "DeleteMessage")
    body += "<" + action + "Result>" + result + "</" + action + "Result>";
  body += "<ResponseMetadata>" + element("RequestId", request_id) + "</ResponseMetadata></" +
          action + "Response>";
  return body;
}

std::string xml_error(const SqsError& e, const std::string& request_id) {
  return "<?xml version=\"1.0\"?><ErrorResponse xmlns=\"http://queue.amazonaws.com/doc/"
         "2012-11-05/\"><Error>" +
         element("Type", e.sender ? "Sender" : "Receiver") + element("Code", e.code) +
         element("Message", e.what()) + "<Detail/></Error>" + element("RequestId", request_id) +
         "</ErrorResponse>";
}

std::string json_error(const SqsError& e) {
  // A message may quote the request's bytes, UTF-8 or not: replaced, never thrown.
  return json{{"__type", "com.amazonaws.sqs#" + e.json_type}, {"message", e.what()}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace serve
