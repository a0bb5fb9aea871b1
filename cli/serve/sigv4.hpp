// AWS Signature Version 4, checked the way SQS checks it: the Authorization
// header's credential scope, signed headers and signature, X-Amz-Date within
// SQS's clock-skew window (15 minutes either way), the body's SHA-256.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "libq/clock.hpp"

namespace serve {

// Access key id -> secret access key, from a file in ~/.aws/credentials'
// format (any number of [profiles]). Throws q::Error naming the file.
using Credentials = std::map<std::string, std::string>;
Credentials read_credentials(const std::string& path);

struct SignedRequest {
  std::string method;
  std::string target;  // path and query as sent, still percent-encoded
  std::vector<std::pair<std::string, std::string>> headers;  // as received
  std::string body;
};

struct AuthFailure {
  int status = 403;
  std::string code;  // SQS's query-protocol code
  std::string message;
};

constexpr q::Millis kClockSkew = 15 * q::kMinute;

// Empty code: the signature holds. `region` receives the credential scope's region.
AuthFailure verify(const SignedRequest& request, const Credentials& credentials, q::Millis now,
                   std::string& region);

// The signature a client with this secret would send (tests, and the check itself).
std::string signature(const SignedRequest& request, const std::string& secret,
                      const std::string& amz_date, const std::string& scope,
                      const std::vector<std::string>& signed_headers);

}  // namespace serve
