// Requests sent together and answered in any order, so a batch's lease
// reads, lease writes, counts, acks and removals cost one round trip per
// step instead of one per message (issue 24: a q work round of 8 messages
// waited for ~80 round trips one after another).
//
// Nothing here retries. A request left without a clean answer (no answer in
// time, no responders, a transient JetStream error) is redone by the
// caller with Client's own calls, one by one, which retry and are safe to
// repeat: every write carries a unique token, so a write stored the first
// time is recognised. The rules each step keeps are the ones of the calls it
// stands for (Client::get, put_if, remove; Counters::count;
// LeaseBook::finish_ack).
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "libq/nats/client.hpp"

namespace q::nats {

struct Request {
  std::string subject;
  std::string data;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Publishes every request with a reply subject of its own under one inbox
// (256 at a time), then waits up to `wait` for their answers: answers[i] is
// request i's, null when none came (or it could not be sent). Never throws.
std::vector<MsgPtr> request_together(Client& client, const std::vector<Request>& requests,
                                     Millis wait = 2000);

// A JetStream API answer (JSON): its body, or its error code; `clean` is
// false when there was none, or a status (no responders), or a transient
// error: the caller then redoes the request by Client's retried call.
struct ApiAnswer {
  bool clean = false;
  jsErrCode code = static_cast<jsErrCode>(0);
  nlohmann::json body;
};
ApiAnswer api_answer(const natsMsg* answer);

// Client::get of every key, together.
std::vector<std::optional<Record>> get_together(Client& client,
                                                const std::vector<std::string>& keys);

// Client::put_if of every write, together: the claim records (the nats-server
// #4320 workaround, Client::put_if) made in one round, the writes in the
// next, the claims removed in a third (also when a write failed). A write
// that meets another writer's claim is done by Client::put_if alone; one
// without a clean answer is read back (ours when it holds this very value)
// and else published again. A write that fails (Error) does not stop the
// others: with `errors`, errors[i] holds write i's; without, the first is
// thrown once every other write is done and every claim removed.
struct Write {
  std::string key;
  std::string value;  // unique to this write (carries a token)
  std::uint64_t expected = 0;
};
std::vector<std::optional<std::uint64_t>> put_if_together(
    Client& client, const std::vector<Write>& writes, Client::OnClaim on_claim,
    std::vector<std::exception_ptr>* errors = nullptr);

// Client::remove of every revision, together.
void remove_together(Client& client, const std::vector<std::uint64_t>& revisions);

// Which of `seqs` `stream` still holds (STREAM.MSG.GET by sequence, answered
// by its leader): present[i] for seqs[i].
std::vector<bool> present_together(Client& client, const std::string& stream,
                                   const std::vector<std::uint64_t>& seqs);

}  // namespace q::nats
