// An SQS error reply: the HTTP status and the code SQS sends for it, in both
// protocols (the query protocol's code, and the AWS JSON 1.0 __type).
#pragma once

#include <stdexcept>
#include <string>

namespace serve {

struct SqsError : std::runtime_error {
  int status;
  std::string code;       // query protocol: AWS.SimpleQueueService.NonExistentQueue
  std::string json_type;  // AWS JSON 1.0: QueueDoesNotExist
  bool sender = true;     // the client's fault (Sender) or the server's (Receiver)
  SqsError(int status_, std::string code_, std::string json_type_, const std::string& message,
           bool sender_ = true)
      : std::runtime_error(message),
        status(status_),
        code(std::move(code_)),
        json_type(std::move(json_type_)),
        sender(sender_) {}
};

inline SqsError invalid_parameter(const std::string& message) {
  return SqsError(400, "InvalidParameterValue", "InvalidParameterValue", message);
}
inline SqsError invalid_attribute(const std::string& message) {
  return SqsError(400, "InvalidAttributeValue", "InvalidAttributeValue", message);
}
inline SqsError missing_parameter(const std::string& name) {
  return SqsError(400, "MissingParameter", "MissingParameter",
                  "The request must contain the parameter " + name + ".");
}
inline SqsError no_such_queue(const std::string& name) {
  return SqsError(400, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
                  "The specified queue does not exist: " + name);
}

}  // namespace serve
