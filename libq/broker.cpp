#include "libq/broker.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "libq/error.hpp"
#include "libq/rules.hpp"
#include "libq/timefmt.hpp"

namespace q {

QueueConfig apply(QueueConfig c, const ConfigChange& change) {
  if (change.visibility_timeout) c.visibility_timeout = *change.visibility_timeout;
  if (change.max_receives) c.max_receives = *change.max_receives;
  if (change.retention) c.retention = *change.retention;
  if (change.delay) c.delay = *change.delay;
  if (change.max_depth) c.max_depth = *change.max_depth;
  if (change.max_size) c.max_size = *change.max_size;
  if (change.dedup_window) c.dedup_window = *change.dedup_window;
  if (change.rate) c.rate = *change.rate;
  if (change.fifo) c.fifo = *change.fifo;
  if (change.content_dedup) c.content_dedup = *change.content_dedup;
  return c;
}

Attributes last_value_wins(Attributes attributes) {
  Attributes out;
  std::map<std::string, std::size_t> index;
  for (auto& [key, value] : attributes) {
    auto [at, fresh] = index.emplace(key, out.size());
    if (fresh)
      out.emplace_back(std::move(key), std::move(value));
    else
      out[at->second].second = std::move(value);
  }
  return out;
}

std::string plural(std::uint64_t n, const std::string& noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

const char* to_string(MessageState state) {
  switch (state) {
    case MessageState::Visible: return "visible";
    case MessageState::InFlight: return "in_flight";
    case MessageState::Delayed: return "delayed";
    case MessageState::Dead: return "dead";
  }
  return "unknown";
}

const char* to_string(AttemptEnd end) {
  switch (end) {
    case AttemptEnd::Open: return "open";
    case AttemptEnd::Released: return "released";
    case AttemptEnd::TimedOut: return "timed_out";
    case AttemptEnd::HeartbeatLost: return "heartbeat_lost";
    case AttemptEnd::DeadLettered: return "dead_lettered";
  }
  return "unknown";
}

Millis backoff_delay(Millis base, Millis cap, std::uint32_t receive_count, double unit) {
  if (base <= 0 || cap <= 0) return 0;
  std::uint32_t exponent = receive_count == 0 ? 0 : std::min<std::uint32_t>(receive_count - 1, 40);
  double ceiling =
      std::min(static_cast<double>(cap), std::ldexp(static_cast<double>(base), exponent));
  unit = std::clamp(unit, 0.0, 1.0);
  return static_cast<Millis>(std::floor(ceiling * unit));
}

// ---- Broker: the rules, then the backend -------------------------------------

QueueConfig Broker::default_config() {
  QueueConfig config;
  config.max_size = std::min(config.max_size, do_capabilities().max_size);
  return config;
}

bool Broker::create_queue(const std::string& queue, const ConfigChange& change) {
  check_queue_name(queue);
  validate(apply(QueueConfig{}, change));
  check_capabilities(do_capabilities(), change);
  return do_create_queue(queue, change);
}

QueueConfig Broker::configure(const std::string& queue, const ConfigChange& change) {
  check_queue_name(queue);
  check_capabilities(do_capabilities(), change);
  return do_configure(queue, change);
}

RemovedCounts Broker::delete_queue(const std::string& queue) {
  check_queue_name(queue);
  return do_delete_queue(queue);
}

std::vector<std::string> Broker::list_queues() { return do_list_queues(); }

std::vector<SendResult> Broker::send(const std::string& queue,
                                     std::vector<OutgoingMessage> messages,
                                     const SendOptions& options) {
  check_queue_name(queue);
  for (const auto& m : messages) check_outgoing(queue, m);
  return do_send(queue, std::move(messages), options);
}

std::vector<Message> Broker::receive(const std::string& queue, const ReceiveOptions& options) {
  check_queue_name(queue);
  check_receive(options);
  return do_receive(queue, options);
}

std::vector<ReceiptResult> Broker::ack(const std::string& queue,
                                       const std::vector<std::string>& receipts) {
  check_queue_name(queue);
  return do_ack(queue, receipts);  // a malformed receipt is one result, not an error
}

Millis Broker::extend(const std::string& queue, const std::string& receipt, Millis by) {
  check_queue_name(queue);
  check_extend_by(by);
  check_receipt(receipt);
  return do_extend(queue, receipt, by);
}

Millis Broker::nack(const std::string& queue, const std::string& receipt,
                    const NackOptions& options) {
  return nack_or_dead_letter(queue, receipt, options).visible_at;
}

NackResult Broker::nack_or_dead_letter(const std::string& queue, const std::string& receipt,
                                       const NackOptions& options) {
  check_queue_name(queue);
  check_nack(options);
  check_receipt(receipt);
  return do_nack(queue, receipt, options);
}

void Broker::dead_letter(const std::string& queue, const std::string& receipt,
                         const std::string& reason, const RunReport& run) {
  check_queue_name(queue);
  check_receipt(receipt);
  do_dead_letter(queue, receipt, reason, run);
}

void Broker::pause(const std::string& queue, Millis until, const std::string& reason) {
  check_queue_name(queue);
  if (reason.size() > kMaxReason)
    throw Error(ErrorKind::InvalidData,
                fmt::format("--reason: {} bytes, at most {} are kept", reason.size(), kMaxReason));
  do_pause(queue, until, reason);
}

std::optional<Pause> Broker::resume(const std::string& queue) {
  check_queue_name(queue);
  return do_resume(queue);
}

std::optional<Message> Broker::show(const std::string& queue, const std::string& id) {
  check_queue_name(queue);
  parse_id(id);
  return do_show(queue, id);
}

void Broker::register_worker(std::uint32_t pid, Millis since, const std::string& command) {
  do_register_worker(pid, since, command);
}

void Broker::unregister_worker(std::uint32_t pid, Millis since) {
  do_unregister_worker(pid, since);
}

namespace {
// A stage's two queues: named right, and not the same queue.
void check_stage(const std::string& queue, const std::string& to) {
  check_queue_name(queue);
  check_queue_name(to);
  if (to == queue)
    throw Error(ErrorKind::Usage,
                fmt::format("queue {}: a stage cannot send to the queue it consumes", queue));
}
}  // namespace

AckSendResult Broker::ack_and_send(const std::string& queue, const std::string& receipt,
                                   const std::string& to, std::vector<OutgoingMessage> messages,
                                   const SendOptions& options) {
  check_stage(queue, to);
  for (const auto& m : messages) check_outgoing(to, m);
  return do_ack_and_send(queue, receipt, to, std::move(messages), options);
}

std::vector<AckSendResult> Broker::ack_and_send_each(const std::string& queue,
                                                     const std::string& to,
                                                     std::vector<StageStep> steps,
                                                     const SendOptions& options) {
  check_stage(queue, to);
  // A step with a message no queue takes is refused here, alone.
  std::vector<AckSendResult> results(steps.size());
  std::vector<std::size_t> valid;
  std::vector<StageStep> checked;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    try {
      for (const auto& m : steps[i].messages) check_outgoing(to, m);
    } catch (const Error& e) {
      if (!e.refuses_the_request()) throw;
      results[i].refused = e.what();
      continue;
    }
    valid.push_back(i);
    checked.push_back(std::move(steps[i]));
  }
  auto done = checked.empty() ? std::vector<AckSendResult>{}
                              : do_ack_and_send_each(queue, to, std::move(checked), options);
  for (std::size_t k = 0; k < done.size(); ++k) results[valid[k]] = std::move(done[k]);
  // Steps after the first one not tried are not tried either.
  if (done.size() < valid.size()) results.resize(valid[done.size()]);
  return results;
}

std::vector<AckSendResult> Broker::do_ack_and_send_each(const std::string& queue,
                                                        const std::string& to,
                                                        std::vector<StageStep> steps,
                                                        const SendOptions& options) {
  std::vector<AckSendResult> results;
  for (auto& step : steps) {
    try {
      results.push_back(
          do_ack_and_send(queue, step.receipt, to, std::move(step.messages), options));
    } catch (const Error& e) {
      if (!e.refuses_the_request()) {  // the lock or the store: the call ends
        if (results.empty()) throw;
        return results;  // the rest not tried
      }
      AckSendResult refused;
      refused.refused = e.what();
      results.push_back(std::move(refused));
    }
  }
  return results;
}

AckReceiveResult Broker::ack_and_receive(const std::string& queue,
                                         const std::vector<std::string>& receipts,
                                         const ReceiveOptions& options) {
  check_queue_name(queue);
  check_receive(options);
  if (options.wait != 0)
    throw Error(ErrorKind::Usage,
                fmt::format("queue {}: ack_and_receive never waits (wait must be 0)", queue));
  return do_ack_and_receive(queue, receipts, options);
}

AckReceiveResult Broker::do_ack_and_receive(const std::string& queue,
                                            const std::vector<std::string>& receipts,
                                            const ReceiveOptions& options) {
  AckReceiveResult result;
  if (!receipts.empty()) result.acked = do_ack(queue, receipts);
  if (options.max_messages > 0) result.received = do_receive(queue, options);
  return result;
}

ReceiptOutcome Broker::ack_done(const std::string& queue, const std::string& receipt,
                                const std::string& key, Millis keep) {
  check_queue_name(queue);
  check_idempotency_key(key);
  check_receipt(receipt);
  return do_ack_done(queue, receipt, key, keep);
}

bool Broker::is_done(const std::string& queue, const std::string& key) {
  check_queue_name(queue);
  check_idempotency_key(key);
  return do_is_done(queue, key);
}

Millis Broker::next_delivery(const std::string& queue, bool rate_limited) {
  check_queue_name(queue);
  return do_next_delivery(queue, rate_limited);
}

std::unique_ptr<ChangeWatch> Broker::watch() { return do_watch(); }

std::vector<Message> Broker::peek(const std::string& queue, std::size_t max) {
  check_queue_name(queue);
  return do_peek(queue, max);
}

std::uint64_t Broker::purge(const std::string& queue) {
  check_queue_name(queue);
  return do_purge(queue);
}

std::vector<QueueStats> Broker::stats(const std::string& queue) {
  if (!queue.empty()) check_queue_name(queue);
  return do_stats(queue);
}

std::optional<QueueConfig> Broker::queue_config(const std::string& queue) {
  check_queue_name(queue);
  return do_queue_config(queue);
}

std::vector<Message> Broker::dead_letters(const std::string& queue, std::size_t max) {
  check_queue_name(queue);
  return do_dead_letters(queue, max);
}

void Broker::each_dead_letter(const std::string& queue,
                              const std::function<bool(const Message&)>& each) {
  check_queue_name(queue);
  do_each_dead_letter(queue, each);
}

std::uint64_t Broker::purge_dead_letters(const std::string& queue) {
  check_queue_name(queue);
  return do_purge_dead_letters(queue);
}

std::vector<Message> Broker::redrive(const std::string& queue, const RedriveOptions& options) {
  check_queue_name(queue);
  if (!options.to.empty()) check_queue_name(options.to);
  for (const auto& id : options.ids) parse_id(id, "id");
  return do_redrive(queue, options);
}

std::optional<Message> Broker::find_dead_letter(const std::string& queue, const std::string& id) {
  check_queue_name(queue);
  parse_id(id);
  return do_find_dead_letter(queue, id);
}

std::vector<std::string> Broker::delete_dead_letters(const std::string& queue,
                                                     const std::vector<std::string>& ids) {
  check_queue_name(queue);
  for (const auto& id : ids) parse_id(id);
  return do_delete_dead_letters(queue, ids);
}

void Broker::export_messages(const std::string& queue,
                             const std::function<void(const Message&)>& each) {
  check_queue_name(queue);
  do_export_messages(queue, each);
}

std::vector<std::string> Broker::import_messages(const std::string& queue,
                                                 std::vector<Message> messages, bool create_queue,
                                                 bool skip_existing) {
  check_queue_name(queue);
  return do_import_messages(queue, std::move(messages), create_queue, skip_existing);
}

void Broker::backup(const std::string& path) { do_backup(path); }

std::vector<std::string> Broker::verify() { return do_verify(); }

}  // namespace q
