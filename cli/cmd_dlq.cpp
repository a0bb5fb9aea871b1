// q dlq list|show|delete|purge: a queue's dead-letter queue.
#include <algorithm>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "context.hpp"
#include "dead_filter.hpp"
#include "error.hpp"
#include "input.hpp"
#include "output.hpp"
#include "rates.hpp"

namespace cli {

namespace {

struct DlqListFlags {
  std::string queue;
  std::size_t max = SIZE_MAX;
  bool json = false, by_reason = false;
  DeadFilterFlags filter;
};

void run_list(const DlqListFlags& f, Context& ctx) {
  DeadFilter filter(f.filter);
  q::Millis now = q::SystemClock().now();
  // One dead letter at a time: memory follows what is shown, not the queue.
  std::vector<q::Message> letters;
  std::map<std::string, std::uint64_t> counts;
  std::uint64_t matched = 0;
  ctx.open()->each_dead_letter(f.queue, [&](const q::Message& m) {
    if (matched >= f.max) return false;
    if (!filter.matches(m, now)) return true;
    if (f.by_reason) {
      ++counts[m.reason];
    } else {
      letters.push_back(m);
    }
    return ++matched < f.max;
  });
  if (f.by_reason) {
    std::vector<std::pair<std::string, std::uint64_t>> sorted(counts.begin(), counts.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    for (const auto& [reason, count] : sorted)
      ctx.out += f.json ? JsonObject().str("reason", reason).num("count", static_cast<long long>(count)).done() + "\n"
                        : fmt::format("{:>7} x {}\n", count, text_escape(reason));
    return;
  }
  if (f.json) {
    for (const auto& m : letters) ctx.out += message_json(m, true);
    return;
  }
  if (letters.empty()) return;
  Table t;
  t.row({"ID", "AGE", "RECEIVES", "REASON", "BODY"});
  for (const auto& m : letters)
    t.row({m.id, short_duration(now - m.sent_at), std::to_string(m.receive_count),
           text_escape(m.reason, 40), text_escape(m.body, 40)});
  ctx.out += t.render();
}

}  // namespace

void add_dlq(CLI::App& app, Context& ctx) {
  if (!ctx.wants("dlq")) return;
  auto* dlq = app.add_subcommand("dlq", "Inspect, delete or empty a queue's dead letters");
  dlq->require_subcommand(1);

  auto f = std::make_shared<DlqListFlags>();
  auto* list = dlq->add_subcommand(
      "list", "List dead letters, oldest first: id, age, receive count, reason and a body "
              "preview (--json: whole records; --by-reason: counts per reason)");
  list->add_option("QUEUE", f->queue, "Queue whose dead letters to list")->required();
  list->add_option("-n,--max", f->max, "List at most N")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{1}, SIZE_MAX));
  list->add_flag("--json", f->json, "One JSON object a line with the whole record");
  list->add_flag("--by-reason", f->by_reason, "Count the dead letters per reason, most first");
  add_dead_filter_flags(list, f->filter);
  list->callback([f, &ctx] { run_list(*f, ctx); });

  struct ShowFlags {
    std::string queue, id;
    bool json = false;
  };
  auto show_flags = std::make_shared<ShowFlags>();
  auto* show = dlq->add_subcommand(
      "show", "Print one dead letter: its body exactly as sent, or --json for the whole record");
  show->add_option("QUEUE", show_flags->queue, "Queue of the dead letter")->required();
  show->add_option("ID", show_flags->id, "Message id, as in 'q dlq list'")->required();
  show->add_flag("--json", show_flags->json, "The whole record as one JSON object");
  show->callback([show_flags, &ctx] {
    auto m = ctx.open()->find_dead_letter(show_flags->queue, show_flags->id);
    if (!m)
      throw q::Error(q::ErrorKind::NotFound, fmt::format("queue {}: no dead letter {}",
                                                         show_flags->queue, show_flags->id));
    ctx.out += show_flags->json ? message_json(*m, true) : m->body;
  });

  struct DeleteFlags {
    std::string queue;
    std::vector<std::string> ids;
  };
  auto delete_flags = std::make_shared<DeleteFlags>();
  auto* del = dlq->add_subcommand(
      "delete", "Discard the dead letters named (after inspection); prints what it removed. "
                "Exit 66 if any id was not found");
  del->add_option("QUEUE", delete_flags->queue, "Queue of the dead letters")->required();
  del->add_option("ID", delete_flags->ids, "Message ids")->required();
  del->callback([delete_flags, &ctx] {
    auto missing = ctx.open()->delete_dead_letters(delete_flags->queue, delete_flags->ids);
    for (const auto& id : delete_flags->ids)
      if (std::find(missing.begin(), missing.end(), id) == missing.end())
        ctx.out += fmt::format("deleted dead letter {}\n", id);
    for (const auto& id : missing)
      print_error(fmt::format("queue {}: no dead letter {}", delete_flags->queue, id));
    if (!missing.empty()) ctx.exit = kNoInput;
  });

  auto queue = std::make_shared<std::string>();
  auto* purge = dlq->add_subcommand("purge", "Discard every dead letter of a queue. Does not "
                                             "prompt");
  purge->add_option("QUEUE", *queue, "Queue whose dead letters to discard")->required();
  purge->callback([queue, &ctx] {
    auto removed = ctx.open()->purge_dead_letters(*queue);
    ctx.out += fmt::format("purged {} from {}\n", q::plural(removed, "dead letter"), *queue);
  });
}

}  // namespace cli
