#include "cli/serve/message_attributes.hpp"

#include <fmt/format.h>

#include "cli/serve/crypto.hpp"
#include "cli/serve/service_input.hpp"
#include "cli/serve/sqs_error.hpp"

namespace serve {

using nlohmann::json;

namespace {

constexpr const char* kTypePrefix = "AWS.DataType.";  // SQS reserves "AWS." names

void put_length(std::string& out, std::string_view s) {
  auto n = static_cast<std::uint32_t>(s.size());
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xFF);
  out += s;
}

}  // namespace

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
    if (a.type.compare(0, 6, "Binary") != 0) a.value = sqs_text(a.value);
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

}  // namespace serve
