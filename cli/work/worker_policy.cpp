#include "cli/work/worker_policy.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/timefmt.hpp"
#include "libq/utf8.hpp"
#include "cli/input.hpp"
#include "cli/work/worker_child.hpp"

namespace cli::work {

namespace {

// The last three lines the command wrote to stderr, for the reason.
std::string stderr_lines(const std::string& tail) {
  std::vector<std::string_view> lines;
  std::string_view rest(tail);
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    auto line = rest.substr(0, nl);
    if (!line.empty() && line != "\r") lines.push_back(line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  std::string text;
  for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i) {
    if (!text.empty()) text.push_back('\n');
    text.append(lines[i]);
  }
  if (text.size() > 1000) text = "..." + std::string(q::utf8_suffix(text, 1000));
  return text;
}

std::string cannot_run(const std::string& program, int why) {
  std::string text = fmt::format("cannot run {}: {}", program, std::strerror(why));
  if (why == E2BIG)
    text +=
        " (the message's attributes and q work's environment exceed the system's "
        "limit for a command's arguments and environment)";
  return text;
}

}  // namespace

std::string lease_lost_note(const std::string& receipt) {
  return fmt::format(
      "receipt {}: done, but its lease was lost before the ack (another "
      "consumer may run it again; raise the visibility timeout?)",
      receipt);
}

Judgement judge(const Ending& e, const PolicyOptions& o) {
  Judgement j;
  if (e.stopped) {
    j.verdict = Verdict::ReleaseAtStop;
    j.what = fmt::format("q work stopped after {} grace", q::format_duration(o.grace));
  } else if (e.output_over_limit) {
    j.what = fmt::format("output over {} bytes (--to-max-bytes)", o.stage.max_bytes);
  } else if (e.timed_out) {
    j.what = fmt::format("timed out after {}", q::format_duration(o.timeout.value_or(0)));
  } else if (e.exec_errno != 0) {
    j.what = cannot_run(o.program, e.exec_errno);
  } else if (WIFEXITED(e.status)) {
    int code = WEXITSTATUS(e.status);
    if (code == 0) j.verdict = Verdict::Ack;
    if (code == 65) j.verdict = Verdict::DeadLetter;
    j.what = fmt::format("exit status {}", code);
  } else if (WIFSIGNALED(e.status)) {
    j.what = fmt::format("killed by {}", signal_name(WTERMSIG(e.status)));
  }
  auto tail = stderr_lines(e.stderr_tail);
  j.reason = tail.empty() ? j.what : j.what + ": " + tail;
  return j;
}

q::RunReport run_report(const Ending& e) {
  q::RunReport run;
  if (e.exec_errno == 0 && WIFEXITED(e.status)) run.exit_status = WEXITSTATUS(e.status);
  if (e.exec_errno == 0 && WIFSIGNALED(e.status)) run.exit_status = 128 + WTERMSIG(e.status);
  std::string_view head(e.stderr_head);
  while (!head.empty() && (head.front() == '\n' || head.front() == '\r')) head.remove_prefix(1);
  std::string_view first = head.substr(0, head.find('\n'));
  if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
  run.first_line = std::string(q::utf8_prefix(first, 1000));
  run.stderr_tail = stderr_lines(e.stderr_tail);
  return run;
}

OutcomePolicy::OutcomePolicy(q::Broker& broker, const q::Clock& clock, PolicyOptions options)
    : broker_(broker), clock_(clock), o_(std::move(options)) {}

bool OutcomePolicy::plain_ack(const Ending& ending, const std::string& key) const {
  return key.empty() && o_.stage.to.empty() && judge(ending, o_).verdict == Verdict::Ack;
}

std::vector<q::OutgoingMessage> stage_messages(const q::Message& source, const std::string& output,
                                               const StageOptions& stage) {
  std::vector<q::OutgoingMessage> messages;
  if (output.empty()) return messages;
  q::Attributes attributes = source.attributes;
  attributes.insert(attributes.end(), stage.attributes.begin(), stage.attributes.end());
  attributes = q::last_value_wins(std::move(attributes));
  std::string group = stage.group.value_or(source.group);
  auto add = [&](std::string body) {
    messages.push_back({std::move(body), attributes, "", group});
  };
  if (stage.lines) {
    for (auto& line : split_records(output, '\n')) add(std::move(line));
  } else {
    add(output);
  }
  return messages;
}

OutcomePolicy::Round OutcomePolicy::ack_and_take(const std::vector<std::string>& receipts,
                                                 const q::ReceiveOptions& take) {
  auto result = broker_.ack_and_receive(o_.queue, receipts, take);
  Round round;
  for (const auto& acked : result.acked)
    if (acked.outcome != q::ReceiptOutcome::Done)
      round.notes.push_back(lease_lost_note(acked.receipt));
  round.taken = std::move(result.received);
  return round;
}

Settled OutcomePolicy::settle(const q::Message& m, const std::string& key, const Ending& ending) {
  const Judgement j = judge(ending, o_);
  const q::RunReport run = run_report(ending);
  try {
    switch (j.verdict) {
      case Verdict::ReleaseAtStop: {
        // Released only now that its command has exited: no second run can
        // overlap this one.
        q::NackOptions nack;
        nack.reason = j.what;
        nack.run = run;
        broker_.nack(o_.queue, m.receipt, nack);
        return {Tally::Released, {}};
      }
      case Verdict::Ack: {
        if (!o_.stage.to.empty()) return pass_on(m, ending);
        q::ReceiptOutcome outcome =
            key.empty() ? broker_.ack(o_.queue, {m.receipt}).at(0).outcome
                        : broker_.ack_done(o_.queue, m.receipt, key, o_.idempotency_window);
        return {Tally::Done,
                outcome == q::ReceiptOutcome::Done ? std::string() : lease_lost_note(m.receipt)};
      }
      case Verdict::DeadLetter:
        broker_.dead_letter(o_.queue, m.receipt, j.reason, run);
        return {Tally::DeadLettered, fmt::format("message {}: dead-lettered ({})", m.id, j.what)};
      case Verdict::Retry: return retry(m, j.what, j.reason, run);
    }
  } catch (const q::Error& e) {
    if (e.kind() != q::ErrorKind::Stale) throw;
    // Its lease ran out meanwhile: it is back in the queue all the same.
    if (j.verdict == Verdict::ReleaseAtStop) return {Tally::None, {}};
    return {Tally::Failed, fmt::format("message {}: {} ({})", m.id, e.what(), j.what)};
  }
  return {};
}

// A stage's success: the source acked and the output sent in one transaction,
// or neither.
Settled OutcomePolicy::pass_on(const q::Message& m, const Ending& ending) {
  q::AckSendResult result;
  try {
    result = broker_.ack_and_send(o_.queue, m.receipt, o_.stage.to,
                                  stage_messages(m, ending.output, o_.stage), {});
  } catch (const q::Error& e) {
    if (!e.refuses_the_request()) throw;
    result.refused = e.what();
  }
  return passed_on(m, ending, result);
}

bool OutcomePolicy::passes_on(const Ending& ending) const {
  return !o_.stage.to.empty() && judge(ending, o_).verdict == Verdict::Ack;
}

std::vector<Settled> OutcomePolicy::pass_on_each(const std::vector<Run>& runs) {
  std::vector<q::StageStep> steps;
  for (const auto& run : runs)
    steps.push_back(
        {run.message->receipt, stage_messages(*run.message, run.ending->output, o_.stage)});
  auto results = broker_.ack_and_send_each(o_.queue, o_.stage.to, std::move(steps), {});
  std::vector<Settled> settled;
  for (std::size_t i = 0; i < results.size(); ++i)
    settled.push_back(passed_on(*runs[i].message, *runs[i].ending, results[i]));
  return settled;
}

Settled OutcomePolicy::passed_on(const q::Message& m, const Ending& ending,
                                 const q::AckSendResult& result) {
  if (!result.refused.empty()) {
    // DST refused the output (full, too large, deleted): a failed run.
    std::string why = fmt::format("output not sent to {}: {}", o_.stage.to, result.refused);
    try {
      return retry(m, why, why, run_report(ending));
    } catch (const q::Error& e) {
      if (e.kind() != q::ErrorKind::Stale) throw;
      return {Tally::Failed, fmt::format("message {}: {} ({})", m.id, e.what(), why)};
    }
  }
  if (result.outcome != q::ReceiptOutcome::Done && !result.sent.empty())
    // nats:// publishes before the ack: the lease was lost in between.
    return {Tally::Failed,
            fmt::format("message {}: done, but its lease was lost before the ack; its output "
                        "was sent to {} all the same (it runs again, and that run's output is "
                        "stored once within {}'s dedup window; raise the visibility timeout?)",
                        m.id, o_.stage.to, o_.stage.to)};
  if (result.outcome != q::ReceiptOutcome::Done)
    return {Tally::Failed,
            fmt::format("message {}: done, but its lease was lost before the ack; its output "
                        "was not sent to {} (it runs again; raise the visibility timeout?)",
                        m.id, o_.stage.to)};
  return {Tally::Done, {}};
}

Settled OutcomePolicy::retry(const q::Message& m, const std::string& what,
                             const std::string& reason, const q::RunReport& run) {
  q::NackOptions nack;
  nack.backoff = true;
  nack.backoff_base = o_.backoff_base;
  nack.backoff_cap = o_.backoff_cap;
  nack.reason = std::string(q::utf8_prefix(reason, q::kMaxReason));
  nack.run = run;
  nack.dead_letter_when_spent = true;
  q::NackResult released = broker_.nack_or_dead_letter(o_.queue, m.receipt, nack);
  if (released.dead_lettered)
    return {Tally::DeadLettered,
            fmt::format("message {}: failed ({}), dead-lettered: receive {} was the last allowed",
                        m.id, what, m.receive_count)};
  return {
      Tally::Failed,
      fmt::format("message {}: failed ({}), retry in {}", m.id, what,
                  q::format_duration(std::max<q::Millis>(0, released.visible_at - clock_.now())))};
}

q::ReceiptResult OutcomePolicy::heartbeat(const std::string& receipt, q::Millis by) {
  q::ReceiptResult result;
  result.receipt = receipt;
  try {
    broker_.extend(o_.queue, receipt, by);
  } catch (const q::Error& e) {
    if (e.kind() == q::ErrorKind::Stale)
      result.outcome = q::ReceiptOutcome::Stale;
    else if (e.kind() == q::ErrorKind::InvalidData)
      result.outcome = q::ReceiptOutcome::Malformed;
    else
      throw;
    result.detail = e.what();
  }
  return result;
}

}  // namespace cli::work
