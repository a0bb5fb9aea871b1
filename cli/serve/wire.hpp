// SQS's two wire protocols over one set of actions (service.hpp): the query
// protocol (form-encoded POST, XML replies; Debian 12's aws CLI and boto3)
// and AWS JSON 1.0 (X-Amz-Target: AmazonSQS.ACTION; current SDKs).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/serve/sqs_error.hpp"

namespace serve {

// application/x-www-form-urlencoded -> name/value pairs, decoded.
std::map<std::string, std::string> parse_form(const std::string& body);
// The query protocol's flattened parameters (Attribute.1.Name,
// SendMessageBatchRequestEntry.2.MessageBody, ...) in the JSON protocol's shape.
nlohmann::json query_to_json(const std::string& action,
                             const std::map<std::string, std::string>& form);
// A reply in the query protocol's XML.
std::string xml_reply(const std::string& action, const nlohmann::json& out,
                      const std::string& request_id);
std::string xml_error(const SqsError& e, const std::string& request_id);
// An AWS JSON 1.0 error body; the x-amzn-query-error header carries e.code too.
std::string json_error(const SqsError& e);

}  // namespace serve
