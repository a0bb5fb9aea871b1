// q send QUEUE [BODY|-] [--lines|-0] [--delay DUR|--at TIME] [--attr K=V]... [--dedup-id ID]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "libq/error.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"

namespace cli {
namespace {

struct SendFlags {
  std::string queue;
  std::optional<std::string> body;
  bool lines = false, null = false, create = false, quiet = false, json = false;
  std::optional<std::string> delay, at, dedup_id;
  std::optional<std::string> group;
  std::vector<std::string> attributes;
};

std::string format_results(const std::vector<q::SendResult>& results, bool json) {
  std::string out;
  for (const auto& r : results) {
    if (json)
      out += JsonObject().str("id", r.id).boolean("duplicate", r.duplicate).done() + "\n";
    else
      out += r.id + "\n";
  }
  return out;
}

// Group commit of a stream (--lines, -0 from stdin): each batch is what is
// readable when the last one committed, sent in one transaction, and its ids
// are written out before more input is read. So a trickle commits each line
// as it arrives, a fast stream commits large batches, memory holds one batch,
// and the ids printed are those committed. Input is awaited (poll) outside
// any transaction: the writer lock is never held while the producer is slow.
constexpr std::size_t kBatchRecords = 32768;
constexpr std::size_t kBatchBytes = 8 << 20;

template <class Make>
void send_stream(const SendFlags& f, Context& ctx, const q::SendOptions& options, Make&& message) {
  RecordReader reader(STDIN_FILENO, f.null ? '\0' : '\n', kBatchRecords, kBatchBytes);
  // Opened at the first batch: a new file is created (and its directory
  // locked for creators) only once there is something to send.
  std::unique_ptr<q::Broker> broker;
  // A record over the queue's max size is refused as soon as it is read that
  // far, numbered from the start of the input (issue 25 item 15: not buffered
  // to 256 MiB first, nor numbered within its batch). The queue's max size is
  // known before the first batch unless --create may make the queue.
  std::size_t max_size = 0;
  auto learn_max_size = [&] {
    max_size = broker->configure(f.queue, {}).max_size;
    reader.limit_records(max_size,
                         fmt::format("queue {}'s max size; nothing of it was sent", f.queue));
  };
  if (!f.create) {
    broker = ctx.open(false);
    learn_max_size();
  }
  std::uint64_t sent = 0;
  bool any = false;
  for (;;) {
    std::vector<std::string> records;
    try {
      std::uint64_t before = reader.records();
      records = reader.next_batch();
      // No input at all: one empty send, which still checks (or creates) the queue.
      if (records.empty() && any) break;
      if (!broker) broker = ctx.open(f.create);
      for (std::size_t i = 0; i < records.size(); ++i)
        if (max_size != 0 && records[i].size() > max_size)
          throw q::Error(q::ErrorKind::InvalidData,
                         fmt::format("queue {}: {} {} of standard input is {} bytes, over the "
                                     "queue's max size of {} bytes; nothing of its batch was sent",
                                     f.queue, f.null ? "record" : "line", before + i + 1,
                                     records[i].size(), max_size));
      std::vector<q::OutgoingMessage> messages;
      messages.reserve(records.size());
      for (auto& body : records) messages.push_back(message(std::move(body)));
      records = {};
      auto results = broker->send(f.queue, std::move(messages), options);
      if (max_size == 0) learn_max_size();  // --create: the queue exists now
      any = true;
      sent += results.size();
      if (!f.quiet && !results.empty() && !write_stdout(format_results(results, f.json))) {
        ctx.exit = kIoErr;
        return;
      }
      if (results.empty()) break;
    } catch (const q::Error& e) {
      if (sent == 0) throw;
      throw q::Error(e.kind(), fmt::format("{} (in this batch; the {} before it {} sent)", e.what(),
                                           q::plural(sent, "message"), sent == 1 ? "was" : "were"));
    }
  }
}

void run_send(const SendFlags& f, Context& ctx) {
  q::SendOptions options;
  options.create_queue = f.create;
  options.delay = duration_flag("--delay", f.delay);
  if (f.at) options.at = time_flag("--at", *f.at);
  // An empty value would mean "none" to libq; its size and text are libq's rules.
  if (f.dedup_id && f.dedup_id->empty())
    throw q::Error(q::ErrorKind::InvalidData, "--dedup-id: must not be empty");
  if (f.group && f.group->empty())
    throw q::Error(q::ErrorKind::InvalidData, "--group: must not be empty");
  q::Attributes attributes;
  for (const auto& a : f.attributes) attributes.push_back(attribute_flag(a));
  // --attr k=1 --attr k=2: the last one wins, as in import and in q work's
  // environment (README "Attributes").
  attributes = q::last_value_wins(std::move(attributes));

  auto message = [&](std::string body) {
    return q::OutgoingMessage{std::move(body), attributes, f.dedup_id.value_or(""),
                              f.group.value_or("")};
  };
  const bool from_stdin = !f.body || *f.body == "-";
  if (!(f.lines || f.null) || !from_stdin) {
    // All input is read before the transaction starts: a producer stalled on
    // its stdin must never hold the writer lock.
    std::string data = from_stdin ? read_stdin() : *f.body;
    std::vector<q::OutgoingMessage> messages;
    if (f.lines || f.null) {
      for (auto& body : split_records(data, f.null ? '\0' : '\n'))
        messages.push_back(message(std::move(body)));
    } else {
      messages.push_back(message(std::move(data)));
    }
    auto results = ctx.open(f.create)->send(f.queue, std::move(messages), options);
    if (!f.quiet) ctx.out += format_results(results, f.json);
    return;
  }
  send_stream(f, ctx, options, message);
}
}  // namespace

void add_send(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<SendFlags>();
  if (!ctx.wants("send")) return;
  auto* cmd = app.add_subcommand(
      "send",
      "Send a message (BODY, or standard input when BODY is absent or '-'); prints "
      "its id");
  cmd->add_option("QUEUE", f->queue, "Queue to send to")->required();
  cmd->add_option("BODY", f->body, "Message body, taken verbatim; '-' or absent: stdin");
  auto* lines = cmd->add_flag("--lines", f->lines,
                              "One message per line of input (without its newline); from "
                              "stdin, sent as it arrives, each batch readable at once in one "
                              "transaction");
  auto* null = cmd->add_flag("-0,--null", f->null, "One message per NUL-terminated record");
  lines->excludes(null);
  auto* delay =
      cmd->add_option("--delay", f->delay, "Make the message visible after DUR")->type_name("DUR");
  cmd->add_option("--at", f->at, "Make the message visible at TIME")
      ->type_name("TIME")
      ->excludes(delay);
  cmd->add_option("--attr", f->attributes, "Attach an attribute (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  auto* dedup = cmd->add_option("--dedup-id", f->dedup_id,
                                "A repeat with this id inside the queue's dedup window stores "
                                "nothing and prints the first message's id")
                    ->type_name("ID");
  dedup->excludes(lines)->excludes(null);
  cmd->add_option("--group", f->group,
                  "FIFO queues: the message group; each group is delivered in send order")
      ->type_name("ID");
  cmd->add_flag("--create", f->create,
                "Create the queue (and file) with default settings if "
                "missing");
  auto* quiet = cmd->add_flag("-q,--quiet", f->quiet, "Print nothing on success");
  cmd->add_flag("--json", f->json, "Print {\"id\":..,\"duplicate\":..} per message")
      ->excludes(quiet);
  cmd->callback([f, &ctx] { run_send(*f, ctx); });
}

}  // namespace cli
