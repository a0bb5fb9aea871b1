// Reading SQS requests: fields, numbers in range, queue URLs and ARNs, batch
// ids, bodies SQS accepts; q::Error as SqsError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "libq/error.hpp"
#include "cli/serve/sqs_error.hpp"
#include "libq/broker.hpp"

namespace serve {

// SQS's limits
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html).
constexpr std::uint32_t kMaxMessageSize = 256 * 1024;
constexpr std::size_t kMaxBatch = 10;

std::string str(const nlohmann::json& in, const char* key);
bool has(const nlohmann::json& in, const char* key);
std::string required(const nlohmann::json& in, const char* key);
// A number given as a JSON number or (query protocol, attributes) as text.
std::int64_t integer(const nlohmann::json& v, const std::string& name, std::int64_t lo,
                     std::int64_t hi, bool attribute = false);
std::string queue_from_url(const std::string& url);
std::string queue_from_arn(const std::string& arn, const char* field);
bool valid_batch_id(const std::string& id);
// SQS accepts #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF in UTF-8.
bool valid_body(const std::string& s);
// `s` as an SQS client can be given it: each byte that starts no character
// valid_body() accepts becomes U+FFFD. A body `q send` stored that is not
// such text (binary, control characters) reaches SQS clients this way.
std::string sqs_text(const std::string& s);
// NAME is among the wanted names (All, .*, PREFIX.*).
bool wanted(const std::vector<std::string>& names, const std::string& name);
std::vector<std::string> names(const nlohmann::json& in, const char* key);
std::string seconds(q::Millis ms);
// A FIFO message's SequenceNumber: the queue's sequence number in its id
// (q's ids are 'm' and that number in hex), in decimal zero-padded to 20
// digits, so that it grows with the send order compared as a number or as text.
std::string sequence_number(const std::string& id);
SqsError from_q(const q::Error& e, const std::string& queue);

}  // namespace serve
