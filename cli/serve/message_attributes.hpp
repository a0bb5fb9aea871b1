// Message attributes: SQS's (typed, binary in base64 on the wire) as q's
// NAME=VALUE pairs and back, their MD5OfMessageAttributes and size.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "libq/broker.hpp"

namespace serve {

struct Attribute {
  std::string type, value;  // value: StringValue, or BinaryValue's bytes (decoded)
};
using AttributeMap = std::map<std::string, Attribute>;  // sorted by name, as the MD5 wants

// MD5OfMessageAttributes as SQS computes it.
std::string attributes_md5(const AttributeMap& attributes);
// A request's MessageAttributes, checked.
AttributeMap read_message_attributes(const nlohmann::json& in);
q::Attributes to_q(const AttributeMap& attributes);
AttributeMap from_q(const q::Attributes& attributes);
nlohmann::json attributes_json(const AttributeMap& attributes);
std::size_t attributes_size(const AttributeMap& attributes);

}  // namespace serve
