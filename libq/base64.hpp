// Base64 (RFC 4648, with padding), the project's one encoder and decoder:
// bodies and attributes that are not UTF-8 travel in JSON this way (cli), and
// JetStream's API answers carry stored data and headers this way (libq/nats).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace q {

std::string base64(std::string_view s);
// Refuses anything but canonical base64 (length, alphabet, padding, unused bits).
std::optional<std::string> unbase64(std::string_view text);

}  // namespace q
