#include "libq/nats/history.hpp"

namespace q::nats {

using json = nlohmann::json;

json attempts_json(const std::vector<Attempt>& attempts) {
  json out = json::array();
  for (const auto& a : attempts) {
    json j = {{"n", a.receive},           {"t", a.received_at}, {"p", a.pid},
              {"ws", a.worker_since},     {"c", a.command},     {"e", static_cast<int>(a.end)},
              {"x", a.ended_at},          {"why", a.reason},    {"f", a.run.first_line},
              {"tail", a.run.stderr_tail}};
    if (a.run.exit_status) j["s"] = *a.run.exit_status;
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<Attempt> attempts_from(const json& j) {
  std::vector<Attempt> out;
  for (const auto& e : j) {
    Attempt a;
    a.receive = e.at("n");
    a.received_at = e.at("t");
    a.pid = e.at("p");
    a.worker_since = e.at("ws");
    a.command = e.value("c", "");
    a.end = static_cast<AttemptEnd>(e.at("e").get<int>());
    a.ended_at = e.at("x");
    a.reason = e.value("why", "");
    a.run.first_line = e.value("f", "");
    a.run.stderr_tail = e.value("tail", "");
    if (e.contains("s")) a.run.exit_status = e.at("s").get<int>();
    out.push_back(std::move(a));
  }
  return out;
}

std::string attempts_header(const std::vector<Attempt>& attempts) {
  if (attempts.empty()) return {};
  return attempts_json(attempts).dump(-1, ' ', true);
}

std::vector<Attempt> attempts_from_header(const std::string& text) {
  if (text.empty()) return {};
  return attempts_from(json::parse(text));
}

void add_attempt(std::vector<Attempt>& history, Attempt a) {
  history.push_back(std::move(a));
  if (history.size() > kMaxAttempts)
    history.erase(history.begin(), history.end() - static_cast<std::ptrdiff_t>(kMaxAttempts));
}

void Workers::add(std::uint32_t pid, Millis since, const std::string& command) {
  std::string value = json{{"c", command}, {"w", random_token()}}.dump();
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto cur = client_.get(key(pid, since));
    if (client_.put_if(key(pid, since), value, cur ? cur->revision : 0)) return;
  }
}

void Workers::drop(std::uint32_t pid, Millis since) {
  if (auto cur = client_.get(key(pid, since))) client_.remove(cur->revision);
}

std::string Workers::command(std::uint32_t pid, Millis since) {
  if (since == 0) return {};
  auto cur = client_.get(key(pid, since));
  if (!cur) return {};
  auto j = json::parse(cur->value, nullptr, false);
  return j.is_discarded() ? std::string() : j.value("c", "");
}

}  // namespace q::nats
