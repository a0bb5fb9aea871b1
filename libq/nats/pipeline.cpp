#include "libq/nats/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "libq/base64.hpp"
#include "libq/ids.hpp"
#include "libq/nats/records.hpp"
#include "libq/nats/stage.hpp"

namespace q::nats {

using json = nlohmann::json;

std::vector<MsgPtr> request_together(Client& client, const std::vector<Request>& requests,
                                     Millis wait) {
  std::vector<MsgPtr> answers(requests.size());
  if (requests.empty()) return answers;
  natsInbox* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  std::unique_ptr<natsInbox, Deleter<natsInbox, natsInbox_Destroy>> hold(inbox);
  std::string prefix = s == NATS_OK ? std::string(inbox) + "." : std::string();
  natsSubscription* raw = nullptr;
  if (s == NATS_OK) s = natsConnection_SubscribeSync(&raw, client.nc(), (prefix + "*").c_str());
  SubPtr sub(raw);
  // At most kChunk in flight: a batch of thousands neither floods the
  // servers nor overruns this subscription's pending limit.
  constexpr std::size_t kChunk = 256;
  for (std::size_t from = 0; from < requests.size() && s == NATS_OK; from += kChunk) {
    const std::size_t to = std::min(requests.size(), from + kChunk);
    for (std::size_t i = from; i < to && s == NATS_OK; ++i) {
      const Request& r = requests[i];
      std::string reply = prefix + std::to_string(i);
      natsMsg* m = nullptr;
      s = natsMsg_Create(&m, r.subject.c_str(), reply.c_str(), r.data.data(),
                         static_cast<int>(r.data.size()));
      MsgPtr msg(m);
      for (const auto& [key, value] : r.headers)
        if (s == NATS_OK) s = natsMsgHeader_Set(m, key.c_str(), value.c_str());
      if (s == NATS_OK) s = natsConnection_PublishMsg(client.nc(), m);
    }
    // Not sent: the rest has no answer, for the caller to redo alone (its
    // retries wait for a reconnect or name the failure).
    if (s != NATS_OK) break;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait);
    for (std::size_t got = 0; got < to - from;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      natsMsg* m = nullptr;
      if (natsSubscription_NextMsg(&m, sub.get(), left) != NATS_OK) break;
      MsgPtr msg(m);
      std::string_view subject = natsMsg_GetSubject(m);
      if (subject.size() <= prefix.size()) continue;
      std::size_t i = 0;
      bool number = true;
      for (char c : subject.substr(prefix.size())) {
        if (c < '0' || c > '9') number = false;
        i = i * 10 + static_cast<std::size_t>(c - '0');
      }
      // An earlier chunk's late answer stays unanswered: its redo finds it.
      if (!number || i < from || i >= to || answers[i]) continue;
      answers[i] = std::move(msg);
      ++got;
    }
  }
  return answers;
}

ApiAnswer api_answer(const natsMsg* answer) {
  ApiAnswer a;
  if (!answer) return a;
  natsMsg* m = const_cast<natsMsg*>(answer);
  // A status instead of an answer (503: no responders, 408): none.
  if (!header(m, "Status").empty()) return a;
  const char* data = natsMsg_GetData(m);
  json j = json::parse(data, data + natsMsg_GetDataLength(m), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return a;
  if (auto e = j.find("error"); e != j.end() && e->is_object())
    a.code = static_cast<jsErrCode>(e->value("err_code", 0));
  a.body = std::move(j);
  a.clean = true;
  return a;
}

namespace {

// The sequence a publish's answer gives, when it stored the message.
std::optional<std::uint64_t> stored_at(const ApiAnswer& a) {
  if (!a.clean || a.code != 0) return std::nullopt;
  auto seq = a.body.find("seq");
  if (seq == a.body.end() || !seq->is_number_unsigned()) return std::nullopt;
  return seq->get<std::uint64_t>();
}

Request expected_publish(Client& client, const std::string& key, const std::string& value,
                         std::uint64_t expected) {
  return {client.bucket_subject(key),
          value,
          {{"Nats-Expected-Last-Subject-Sequence", std::to_string(expected)}}};
}

}  // namespace

std::vector<std::optional<Record>> get_together(Client& client,
                                                const std::vector<std::string>& keys) {
  std::vector<Request> requests;
  requests.reserve(keys.size());
  std::string api = "$JS.API.STREAM.MSG.GET." + client.bucket_stream();
  for (const auto& key : keys)
    requests.push_back({api, json{{"last_by_subj", client.bucket_subject(key)}}.dump(), {}});
  auto answers = request_together(client, requests);
  std::vector<std::optional<Record>> out(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ApiAnswer a = api_answer(answers[i].get());
    if (a.clean && a.code == kNoMessageFound) continue;
    auto m = a.body.find("message");
    std::optional<std::string> data;
    if (a.clean && a.code == 0 && m != a.body.end() && m->is_object())
      data = q::unbase64(m->value("data", std::string()));
    if (!data) {
      out[i] = client.get(keys[i]);  // retried, and names any failure
      continue;
    }
    out[i] = Record{std::move(*data), m->value("seq", std::uint64_t{0})};
  }
  return out;
}

namespace {

// A write without a clean answer, done again: ours when the record holds this
// very value (stored, its answer lost, perhaps applied only since).
std::optional<std::uint64_t> redo(Client& client, const std::string& key, const std::string& value,
                                  std::uint64_t expected) {
  if (auto now = client.get(key); now && now->value == value) return now->revision;
  if (auto rev = client.publish_if(key, value, expected)) return rev;
  if (auto now = client.get(key); now && now->value == value) return now->revision;
  return std::nullopt;
}

}  // namespace

std::vector<std::optional<std::uint64_t>> put_if_together(Client& client,
                                                          const std::vector<Write>& writes,
                                                          Client::OnClaim on_claim,
                                                          std::vector<std::exception_ptr>* errors) {
  const std::size_t n = writes.size();
  std::vector<std::optional<std::uint64_t>> out(n);
  std::vector<bool> alone(n, false);        // done by Client::put_if after
  std::vector<std::uint64_t> claims(n, 0);  // the claim record's revision
  std::vector<std::string> claim_values(n);
  std::vector<std::exception_ptr> failed(n);
  auto guarded = [&](std::size_t i, const std::function<void()>& step) {
    try {
      step();
    } catch (const Error&) {
      failed[i] = std::current_exception();
    }
  };
  auto claim_key = [&](std::size_t i) { return fmt::format("cas.{}", writes[i].expected); };
  // Round 1: the claims of the writes over a revision (put_if says why).
  std::vector<Request> requests;
  std::vector<std::size_t> of;
  for (std::size_t i = 0; i < n; ++i) {
    if (writes[i].expected == 0) continue;
    claim_values[i] = client.new_claim_value();
    requests.push_back(expected_publish(client, claim_key(i), claim_values[i], 0));
    of.push_back(i);
  }
  auto answers = request_together(client, requests);
  for (std::size_t r = 0; r < of.size(); ++r) {
    std::size_t i = of[r];
    ApiAnswer a = api_answer(answers[r].get());
    if (auto seq = stored_at(a)) {
      claims[i] = *seq;
    } else if (!a.clean) {
      guarded(i, [&] {
        if (auto rev = redo(client, claim_key(i), claim_values[i], 0))
          claims[i] = *rev;
        else
          alone[i] = true;  // another writer's claim
      });
    } else {
      alone[i] = true;  // another writer's claim, or an error put_if names
    }
  }
  if (!of.empty()) kill_point("cas-claimed");
  // Round 2: the writes, each under its claim (or over "no record").
  requests.clear();
  of.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (alone[i] || failed[i] || (writes[i].expected != 0 && claims[i] == 0)) continue;
    requests.push_back(
        expected_publish(client, writes[i].key, writes[i].value, writes[i].expected));
    of.push_back(i);
  }
  answers = request_together(client, requests);
  for (std::size_t r = 0; r < of.size(); ++r) {
    std::size_t i = of[r];
    ApiAnswer a = api_answer(answers[r].get());
    if (auto seq = stored_at(a))
      out[i] = *seq;
    else if (!(a.clean && a.code == kWrongLastSequence))  // else another write came first
      guarded(i,
              [&] { out[i] = redo(client, writes[i].key, writes[i].value, writes[i].expected); });
  }
  // Round 3: the claims go, whatever became of their writes (a claim left
  // behind would hold its record's other writers for kStaleClaim).
  std::vector<std::uint64_t> held;
  for (std::size_t i = 0; i < n; ++i)
    if (claims[i] != 0) held.push_back(claims[i]);
  if (!held.empty()) {
    kill_point("cas-written");
    try {
      remove_together(client, held);
    } catch (const Error& e) {
      // The writes stand; a claim left behind goes stale (Client::put_if).
      if (e.kind() != ErrorKind::Busy) throw;
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (alone[i] && !failed[i])
      guarded(i, [&] {
        out[i] = client.put_if(writes[i].key, writes[i].value, writes[i].expected, on_claim);
      });
  if (errors) {
    *errors = std::move(failed);
  } else {
    for (const auto& f : failed)
      if (f) std::rethrow_exception(f);
  }
  return out;
}

void remove_together(Client& client, const std::vector<std::uint64_t>& revisions) {
  std::vector<Request> requests;
  std::string api = "$JS.API.STREAM.MSG.DELETE." + client.bucket_stream();
  for (auto rev : revisions)
    requests.push_back({api, json{{"seq", rev}, {"no_erase", true}}.dump(), {}});
  auto answers = request_together(client, requests);
  for (std::size_t i = 0; i < revisions.size(); ++i) {
    ApiAnswer a = api_answer(answers[i].get());
    // Gone already (a newer record of its key, or removed by a retry): as
    // Client::remove, whose retries and errors the rest go through.
    if (a.clean && (a.code == 0 || a.code == static_cast<jsErrCode>(10057) ||
                    a.code == static_cast<jsErrCode>(10043)))
      continue;
    client.remove(revisions[i]);
  }
}

std::vector<bool> present_together(Client& client, const std::string& stream,
                                   const std::vector<std::uint64_t>& seqs) {
  std::vector<Request> requests;
  std::string api = "$JS.API.STREAM.MSG.GET." + stream;
  for (auto seq : seqs) requests.push_back({api, json{{"seq", seq}}.dump(), {}});
  auto answers = request_together(client, requests);
  std::vector<bool> present(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    ApiAnswer a = api_answer(answers[i].get());
    if (a.clean && a.code == 0)
      present[i] = true;
    else if (a.clean && a.code == kNoMessageFound)
      present[i] = false;
    else
      present[i] = client.stored_message(stream, seqs[i],
                                         "reading message " + q::message_id(seqs[i])) != nullptr;
  }
  return present;
}

}  // namespace q::nats
