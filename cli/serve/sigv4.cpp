#include "cli/serve/sigv4.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "cli/serve/crypto.hpp"
#include "libq/error.hpp"

namespace serve {

namespace {

std::string trim(std::string s) {
  auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  return s;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

std::string uri_encode(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (unreserved(c) || (keep_slash && c == '/'))
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string percent_decode(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() + 0 &&
        std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string canonical_query(const std::string& query) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::size_t start = 0;
  while (start < query.size()) {
    auto end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    std::string item = query.substr(start, end - start);
    if (!item.empty()) {
      auto eq = item.find('=');
      std::string k = percent_decode(item.substr(0, eq));
      std::string v = eq == std::string::npos ? "" : percent_decode(item.substr(eq + 1));
      pairs.emplace_back(uri_encode(k, false), uri_encode(v, false));
    }
    start = end + 1;
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto& [k, v] : pairs) out += (out.empty() ? "" : "&") + k + "=" + v;
  return out;
}

std::string header_value(const SignedRequest& r, const std::string& name) {
  std::string joined;
  bool found = false;
  for (const auto& [k, v] : r.headers) {
    if (lower(k) != name) continue;
    // Sequential spaces collapse to one, as SigV4 says.
    std::string value;
    for (char c : trim(v)) {
      if (c == ' ' && !value.empty() && value.back() == ' ') continue;
      value += c;
    }
    joined += (found ? "," : "") + value;
    found = true;
  }
  return joined;
}

bool has_header(const SignedRequest& r, const std::string& name) {
  for (const auto& h : r.headers)
    if (lower(h.first) == name) return true;
  return false;
}

// 20261201T204500Z -> milliseconds since the epoch; -1 when malformed.
q::Millis parse_amz_date(const std::string& s) {
  std::tm tm{};
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return -1;
  for (std::size_t i : {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14})
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return -1;
  tm.tm_year = std::stoi(s.substr(0, 4)) - 1900;
  tm.tm_mon = std::stoi(s.substr(4, 2)) - 1;
  tm.tm_mday = std::stoi(s.substr(6, 2));
  tm.tm_hour = std::stoi(s.substr(9, 2));
  tm.tm_min = std::stoi(s.substr(11, 2));
  tm.tm_sec = std::stoi(s.substr(13, 2));
  return static_cast<q::Millis>(timegm(&tm)) * 1000;
}

std::string amz_date(q::Millis t) {
  std::time_t secs = static_cast<std::time_t>(t / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

AuthFailure fail(int status, std::string code, std::string message) {
  return AuthFailure{status, std::move(code), std::move(message)};
}

}  // namespace

Credentials read_credentials(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw q::Error(q::ErrorKind::NotFound,
                   fmt::format("--credentials {}: cannot read the file", path));
  Credentials credentials;
  std::string line, id, secret, profile;
  auto flush = [&] {
    if (!id.empty() && !secret.empty()) credentials[id] = secret;
    id.clear();
    secret.clear();
  };
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      flush();
      profile = line;
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos)
      throw q::Error(q::ErrorKind::InvalidData,
                     fmt::format("--credentials {}: line {}: not KEY = VALUE", path, number));
    std::string key = lower(trim(line.substr(0, eq))), value = trim(line.substr(eq + 1));
    if (key == "aws_access_key_id") id = value;
    if (key == "aws_secret_access_key") secret = value;
  }
  flush();
  if (credentials.empty())
    throw q::Error(q::ErrorKind::InvalidData,
                   fmt::format("--credentials {}: no aws_access_key_id with its "
                               "aws_secret_access_key",
                               path));
  return credentials;
}

std::string signature(const SignedRequest& r, const std::string& secret,
                      const std::string& amz_date, const std::string& scope,
                      const std::vector<std::string>& signed_headers) {
  auto qmark = r.target.find('?');
  std::string path = r.target.substr(0, qmark);
  std::string query = qmark == std::string::npos ? "" : r.target.substr(qmark + 1);
  if (path.empty()) path = "/";
  std::string canonical =
      r.method + "\n" + uri_encode(path, true) + "\n" + canonical_query(query) + "\n";
  std::string names;
  for (const auto& h : signed_headers) {
    canonical += h + ":" + header_value(r, h) + "\n";
    names += (names.empty() ? "" : ";") + h;
  }
  canonical += "\n" + names + "\n" + hex(sha256(r.body));
  std::string to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + hex(sha256(canonical));
  // scope: DATE/REGION/SERVICE/aws4_request
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    auto slash = scope.find('/', start);
    parts.push_back(scope.substr(start, slash - start));
    start = slash == std::string::npos ? scope.size() : slash + 1;
  }
  std::string key = hmac_sha256("AWS4" + secret, parts[0]);
  key = hmac_sha256(key, parts[1]);
  key = hmac_sha256(key, parts[2]);
  key = hmac_sha256(key, "aws4_request");
  return hex(hmac_sha256(key, to_sign));
}

AuthFailure verify(const SignedRequest& r, const Credentials& credentials, q::Millis now,
                   std::string& region) {
  std::string auth = header_value(r, "authorization");
  if (auth.empty())
    return fail(403, "MissingAuthenticationToken",
                "Request is missing Authentication Token (an AWS Signature Version 4 "
                "Authorization header)");
  const std::string algorithm = "AWS4-HMAC-SHA256 ";
  if (auth.compare(0, algorithm.size(), algorithm) != 0)
    return fail(400, "IncompleteSignature",
                "Only AWS4-HMAC-SHA256 Authorization headers are accepted");
  std::map<std::string, std::string> fields;
  std::string rest = auth.substr(algorithm.size());
  std::size_t start = 0;
  while (start < rest.size()) {
    auto comma = rest.find(',', start);
    if (comma == std::string::npos) comma = rest.size();
    std::string item = trim(rest.substr(start, comma - start));
    auto eq = item.find('=');
    if (eq != std::string::npos) fields[item.substr(0, eq)] = item.substr(eq + 1);
    start = comma + 1;
  }
  if (!fields.count("Credential") || !fields.count("SignedHeaders") || !fields.count("Signature"))
    return fail(400, "IncompleteSignature",
                "The Authorization header needs Credential, SignedHeaders and Signature");
  const std::string& credential = fields["Credential"];
  auto slash = credential.find('/');
  std::string id = credential.substr(0, slash);
  std::string scope = slash == std::string::npos ? "" : credential.substr(slash + 1);
  auto it = credentials.find(id);
  if (it == credentials.end())
    return fail(403, "InvalidClientTokenId",
                "The security token included in the request is invalid (unknown access key id)");
  std::vector<std::string> scope_parts;
  start = 0;
  while (start <= scope.size()) {
    auto s = scope.find('/', start);
    if (s == std::string::npos) s = scope.size();
    scope_parts.push_back(scope.substr(start, s - start));
    start = s + 1;
  }
  if (scope_parts.size() != 4 || scope_parts[3] != "aws4_request" || scope_parts[2] != "sqs")
    return fail(403, "SignatureDoesNotMatch",
                fmt::format("Credential should be scoped to DATE/REGION/sqs/aws4_request, not "
                            "'{}'",
                            scope));
  std::string date = header_value(r, "x-amz-date");
  q::Millis when = parse_amz_date(date);
  if (when < 0)
    return fail(400, "IncompleteSignature", "X-Amz-Date is missing or not YYYYMMDDTHHMMSSZ");
  if (date.compare(0, 8, scope_parts[0]) != 0)
    return fail(403, "SignatureDoesNotMatch",
                "The credential scope's date is not the day of X-Amz-Date");
  if (when < now - kClockSkew || when > now + kClockSkew)
    return fail(400, "RequestExpired",
                fmt::format("Signature expired: {} is not within 15 minutes of the server's "
                            "time {}",
                            date, amz_date(now)));
  std::vector<std::string> signed_headers;
  start = 0;
  const std::string& list = fields["SignedHeaders"];
  while (start < list.size()) {
    auto semi = list.find(';', start);
    if (semi == std::string::npos) semi = list.size();
    signed_headers.push_back(lower(list.substr(start, semi - start)));
    start = semi + 1;
  }
  if (std::find(signed_headers.begin(), signed_headers.end(), "host") == signed_headers.end())
    return fail(403, "SignatureDoesNotMatch", "SignedHeaders must include host");
  for (const auto& h : signed_headers)
    if (!has_header(r, h))
      return fail(403, "SignatureDoesNotMatch",
                  fmt::format("signed header {} is not in the request", h));
  if (has_header(r, "x-amz-content-sha256")) {
    std::string claimed = header_value(r, "x-amz-content-sha256");
    if (claimed != hex(sha256(r.body)))
      return fail(400, "XAmzContentSHA256Mismatch",
                  "x-amz-content-sha256 is not the SHA-256 of the body");
  }
  std::string want = signature(r, it->second, date, scope, signed_headers);
  if (!same_secret(want, lower(fields["Signature"])))
    return fail(403, "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you "
                "provided. Check your AWS Secret Access Key and signing method.");
  region = scope_parts[1];
  return {};
}

}  // namespace serve
