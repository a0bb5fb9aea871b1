#include "nats_done.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sha256.hpp"

namespace q::nats {
namespace {
using json = nlohmann::json;
}  // namespace

// Keys may hold any bytes; a record key takes only subject characters.
std::string DoneBook::key_of(const std::string& queue, const std::string& key) {
  return prefix(queue) + sha256_hex(key);
}

void DoneBook::record(const std::string& queue, const std::string& key, Millis until) {
  std::string k = key_of(queue, key);
  std::string value = json{{"until", until}, {"w", random_token()}}.dump();
  // CAS on the revision read: of two racing writers the later until is kept
  // when the other wrote first (read again and retry).
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto have = client_.get(k);
    if (have) {
      auto j = json::parse(have->value, nullptr, false);
      if (!j.is_discarded() && j.value("until", Millis{0}) >= until) return;
    }
    if (client_.put_if(k, value, have ? have->revision : 0)) return;
  }
  throw Error(ErrorKind::Busy, fmt::format("queue {}: the done record of a key kept changing; "
                                           "try again",
                                           queue));
}

bool DoneBook::is_done(const std::string& queue, const std::string& key, Millis now) {
  auto have = client_.get(key_of(queue, key));
  if (!have) return false;
  auto j = json::parse(have->value, nullptr, false);
  if (j.is_discarded())
    throw Error(ErrorKind::Io,
                fmt::format("queue {}: the done record of key {} is damaged", queue, key));
  if (j.value("until", Millis{0}) > now) return true;
  client_.remove(have->revision);  // past its time: housekeeping on the way
  return false;
}

}  // namespace q::nats
