// q dlq list QUEUE, q dlq purge QUEUE: the dead-letter queue of a queue.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "context.hpp"
#include "output.hpp"
#include "timefmt.hpp"

namespace cli {
namespace {

struct DlqListFlags {
  std::string queue;
  std::size_t max = SIZE_MAX;
  bool json = false;
};

std::string age_text(q::Millis age) {
  if (age < q::kMinute) return fmt::format("{}s", age / q::kSecond);
  if (age < q::kHour) return fmt::format("{}m", age / q::kMinute);
  if (age < q::kDay) return fmt::format("{}h", age / q::kHour);
  return fmt::format("{}d", age / q::kDay);
}

void run_list(const DlqListFlags& f, Context& ctx) {
  auto letters = ctx.open()->dead_letters(f.queue, f.max);
  if (f.json) {
    for (const auto& m : letters) ctx.out += message_json(m, true);
    return;
  }
  if (letters.empty()) return;
  q::Millis now = q::SystemClock().now();
  Table t;
  t.row({"ID", "AGE", "RECEIVES", "REASON", "BODY"});
  for (const auto& m : letters)
    t.row({m.id, age_text(now - m.sent_at), std::to_string(m.receive_count),
           text_escape(m.reason, 40), text_escape(m.body, 40)});
  ctx.out += t.render();
}

}  // namespace

void add_dlq(CLI::App& app, Context& ctx) {
  auto* dlq = app.add_subcommand("dlq", "Inspect or empty a queue's dead-letter queue");
  if (!ctx.wants("dlq")) return;
  dlq->require_subcommand(1);

  auto f = std::make_shared<DlqListFlags>();
  auto* list = dlq->add_subcommand(
      "list", "List dead letters, oldest first: id, age, receive count, reason and a body "
              "preview (--json: whole records)");
  list->add_option("QUEUE", f->queue, "Queue whose dead letters to list")->required();
  list->add_option("-n,--max", f->max, "List at most N")->type_name("N");
  list->add_flag("--json", f->json, "One JSON object a line with the whole record");
  list->callback([f, &ctx] { run_list(*f, ctx); });

  auto queue = std::make_shared<std::string>();
  auto* purge = dlq->add_subcommand("purge", "Discard every dead letter of a queue. Does not "
                                             "prompt");
  purge->add_option("QUEUE", *queue, "Queue whose dead letters to discard")->required();
  purge->callback([queue, &ctx] {
    auto removed = ctx.open()->purge_dead_letters(*queue);
    ctx.out += fmt::format("purged {} dead letters from {}\n", removed, *queue);
  });
}

}  // namespace cli
