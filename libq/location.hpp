// Where a queue lives, as the user names it: a file path, or a NATS cluster
// (nats://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/NAMESPACE, tls://... for
// TLS required). Shared by the static q (which hands NATS locations to q-nats)
// and q-nats. Nothing here talks to a server.
#pragma once

#include <optional>
#include <string>

namespace q {

// The accepted forms, for usage errors.
inline constexpr const char* kLocationForms =
    "a file path, nats://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/NAMESPACE or tls://... "
    "(a file whose path starts like that: ./PATH)";

// nats:// or tls://.
bool is_nats_location(const std::string& location);
// SCHEME:/... (a URL's shape: letters, digits, '+', '-', '.' from a letter,
// then ":/"), or nats: / tls: without the slashes.
bool looks_like_url(const std::string& location);
// Throws Error(Usage) for a URL-shaped location that is not nats:// or
// tls://, naming it (redacted) and the accepted forms; a file path or a NATS
// location passes.
void check_location_scheme(const std::string& location);

// The location as it may be shown anywhere (errors, metrics labels, JSON,
// Q_FILE): a URL's user info is replaced, USER:PASSWORD@ by USER:***@ and a
// token (USER@ alone) by ***@. A file path is returned as is. The one function
// every printed location goes through.
std::string redact_location(const std::string& location);

// A URL's user info, split off: USER:PASSWORD@ (password set) or TOKEN@ (no
// password), percent-decoded. `rest` is the location without it.
struct UserInfo {
  std::string user;
  std::optional<std::string> password;
};
struct SplitLocation {
  std::optional<UserInfo> user_info;
  std::string rest;
};
SplitLocation split_user_info(const std::string& location);

// %XX escapes decoded (RFC 3986); with plus_is_space, '+' is a space too (an
// HTML form's encoding). A '%' not followed by two hex digits stays as it is.
std::string percent_decode(const std::string& text, bool plus_is_space = false);

}  // namespace q
