// q dlq list|show|delete|purge: a queue's dead-letter queue.
#include <algorithm>
#include <iostream>
#include <map>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/confirm.hpp"
#include "cli/dead_filter.hpp"
#include "cli/dead_groups.hpp"
#include "libq/error.hpp"
#include "cli/input.hpp"
#include "cli/output.hpp"
#include "cli/work/rates.hpp"

namespace cli {

namespace {

struct DlqListFlags {
  std::string queue;
  std::size_t max = SIZE_MAX;
  bool json = false, by_reason = false, wide = false;
  std::optional<std::string> by;
  DeadFilterFlags filter;
};

struct Group {
  std::uint64_t count = 0;
  q::Millis first = INT64_MAX, last = INT64_MIN;  // dead_at
  std::size_t order = 0;                          // first seen, to break ties
};

// How much of a reason a table shows: all of it with --wide or in a pipe
// (0: no cut); on a terminal, what its width leaves beside the other columns.
std::size_t reason_width(const DlqListFlags& f, std::size_t others, std::size_t least) {
  if (f.wide || !isatty(STDOUT_FILENO)) return 0;
  std::size_t columns = terminal_columns(STDOUT_FILENO);
  return columns > others + least ? columns - others : least;
}

void run_list(const DlqListFlags& f, Context& ctx) {
  DeadFilter filter(f.filter);
  if (f.by_reason && f.by && *f.by != "reason")
    throw q::Error(q::ErrorKind::Usage, "--by-reason and --by " + *f.by + ": choose one");
  std::optional<GroupBy> by;
  if (f.by)
    by = parse_group_by(*f.by);
  else if (f.by_reason)
    by = GroupBy{};
  q::Millis now = ctx.clock().now();
  // One dead letter at a time: memory follows what is shown, not the queue.
  std::vector<q::Message> letters;
  std::map<std::string, Group> groups;
  std::uint64_t matched = 0;
  ctx.open_for_reading()->each_dead_letter(f.queue, [&](const q::Message& m) {
    if (matched >= f.max) return false;
    if (!filter.matches(m, now)) return true;
    if (by) {
      auto& g = groups[group_key(m, *by)];
      if (g.count++ == 0) g.order = groups.size();
      g.first = std::min(g.first, m.dead_at.value_or(0));
      g.last = std::max(g.last, m.dead_at.value_or(0));
    } else {
      letters.push_back(m);
    }
    return ++matched < f.max;
  });
  if (by) {
    std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return a.second.count != b.second.count ? a.second.count > b.second.count
                                              : a.second.order < b.second.order;
    });
    const char* field = by->kind == GroupBy::Exit        ? "exit"
                        : by->kind == GroupBy::Attribute ? "value"
                                                         : "reason";
    const std::size_t width = reason_width(f, 30, 60);
    Table t;
    t.row({"COUNT", "FIRST", "LAST",
           by->kind == GroupBy::Exit        ? "EXIT"
           : by->kind == GroupBy::Attribute ? "ATTR " + by->attribute
                                            : "REASON"});
    for (const auto& [key, g] : sorted) {
      if (f.json) {
        JsonObject o;
        o.str(field, key).num("count", static_cast<long long>(g.count));
        if (by->kind == GroupBy::Attribute) o.str("attribute", by->attribute);
        ctx.out += o.time("first_dead_at", g.first).time("last_dead_at", g.last).done() + "\n";
      } else {
        t.row({std::to_string(g.count), short_duration(now - g.first) + " ago",
               short_duration(now - g.last) + " ago", text_escape(key, width)});
      }
    }
    if (!f.json && !sorted.empty()) ctx.out += t.render();
    return;
  }
  if (f.json) {
    for (const auto& m : letters) ctx.out += message_json(m, true);
    return;
  }
  if (letters.empty()) return;
  const std::size_t width = reason_width(f, 80, 40);
  Table t;
  t.row({"ID", "AGE", "DEAD FOR", "RECEIVES", "REASON", "BODY"});
  for (const auto& m : letters)
    t.row({m.id, short_duration(now - m.sent_at), short_duration(now - m.dead_at.value_or(now)),
           std::to_string(m.receive_count), text_escape(m.reason, width), text_escape(m.body, 40)});
  ctx.out += t.render();
}

struct DeleteFlags {
  std::string queue;
  std::vector<std::string> ids;
  std::optional<std::uint64_t> max;
  DeadFilterFlags filter;
  DestructiveFlags destructive;
};

// The ids `dlq delete` was given: as arguments, else one a line on stdin.
std::vector<std::string> ids_to_delete(const DeleteFlags& f, bool filtered) {
  if (!f.ids.empty() || filtered) return f.ids;
  // A person at a terminal who forgot the ids would wait for nothing.
  if (isatty(STDIN_FILENO))
    throw q::Error(q::ErrorKind::Usage,
                   "no ids given: pass them as arguments, one a line on standard "
                   "input (which is a terminal), or select with --reason/--since");
  std::vector<std::string> ids;
  for (auto& line : split_records(read_stdin(), '\n'))
    if (!line.empty()) ids.push_back(std::move(line));
  if (ids.empty()) throw q::Error(q::ErrorKind::Usage, "no ids given: standard input was empty");
  return ids;
}

void run_delete(const DeleteFlags& f, Context& ctx) {
  DeadFilter filter(f.filter);
  std::vector<std::string> ids = ids_to_delete(f, filter.active() || f.max);
  auto broker = ctx.open();
  // What is there to delete: chosen as redrive chooses (the named ids, or
  // all, oldest first, that --reason and --since match, at most --max).
  std::vector<std::string> found, missing;
  if (filter.active() || f.max) {
    q::Millis now = ctx.clock().now();
    broker->each_dead_letter(f.queue, [&](const q::Message& m) {
      if (f.max && found.size() >= *f.max) return false;
      if (!ids.empty() && std::find(ids.begin(), ids.end(), m.id) == ids.end()) return true;
      if (filter.matches(m, now)) found.push_back(m.id);
      return true;
    });
    if (found.empty()) {
      print_error(fmt::format("no dead letters of {} matched; nothing was deleted", f.queue));
      ctx.exit = kEmpty;
      return;
    }
  } else {
    for (const auto& id : ids) {
      if (std::find(found.begin(), found.end(), id) != found.end() ||
          std::find(missing.begin(), missing.end(), id) != missing.end())
        continue;
      (broker->find_dead_letter(f.queue, id) ? found : missing).push_back(id);
    }
  }
  if (f.destructive.dry_run) {
    for (const auto& id : found) ctx.out += fmt::format("would delete dead letter {}\n", id);
    for (const auto& id : missing)
      print_error(fmt::format("queue {}: no dead letter {}", f.queue, id));
    print_error(
        fmt::format("would delete {} of {}", q::plural(found.size(), "dead letter"), f.queue));
    if (!missing.empty()) ctx.exit = kNoInput;
    return;
  }
  if (!confirmed(f.destructive, fmt::format("delete {} of {}?",
                                            q::plural(found.size(), "dead letter"), f.queue))) {
    print_error(fmt::format("nothing was deleted from {}", f.queue));
    ctx.exit = kEmpty;
    return;
  }
  std::vector<std::string> gone;
  if (!found.empty()) gone = broker->delete_dead_letters(f.queue, found);
  std::size_t deleted = 0;
  for (const auto& id : found)
    if (std::find(gone.begin(), gone.end(), id) == gone.end()) {
      ctx.out += fmt::format("deleted dead letter {}\n", id);
      ++deleted;
    }
  // Redriven, deleted or expired since it was chosen: as if not found.
  missing.insert(missing.end(), gone.begin(), gone.end());
  for (const auto& id : missing)
    print_error(fmt::format("queue {}: no dead letter {}", f.queue, id));
  print_error(fmt::format("deleted {} of {}", q::plural(deleted, "dead letter"), f.queue));
  if (!missing.empty()) ctx.exit = kNoInput;
}

}  // namespace

void add_dlq(CLI::App& app, Context& ctx) {
  if (!ctx.wants("dlq")) return;
  auto* dlq = app.add_subcommand("dlq", "Inspect, delete or empty a queue's dead letters");
  dlq->require_subcommand(1);

  auto f = std::make_shared<DlqListFlags>();
  auto* list = dlq->add_subcommand(
      "list",
      "List dead letters, oldest first: id, age, receive count, reason and a body "
      "preview (--json: whole records; --by-reason: counts per reason)");
  list->add_option("QUEUE", f->queue, "Queue whose dead letters to list")->required();
  list->add_option("-n,--max", f->max, "List at most N")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{1}, SIZE_MAX));
  list->add_flag("--json", f->json, "One JSON object a line with the whole record");
  list->add_flag("--wide", f->wide,
                 "Whole reasons on a terminal too (in a pipe they are never cut)");
  list->add_flag("--by-reason", f->by_reason,
                 "Group the dead letters that failed the same way: count, first and last "
                 "dead-lettered, per exit status and first and last stderr line, with status "
                 "codes kept and other numbers, ids, hex and paths masked (same as --by reason)");
  list->add_option("--by", f->by,
                   "Group by reason, exit (q work's exit status) or attr:KEY (an attribute's "
                   "value), most first")
      ->type_name("WHAT");
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
    auto m = ctx.open_for_reading()->find_dead_letter(show_flags->queue, show_flags->id);
    if (!m)
      throw q::Error(q::ErrorKind::NotFound,
                     fmt::format("queue {}: no dead letter {}", show_flags->queue, show_flags->id));
    ctx.out += show_flags->json ? message_json(*m, true) : m->body;
  });

  auto delete_flags = std::make_shared<DeleteFlags>();
  auto* del = dlq->add_subcommand(
      "delete",
      "Discard dead letters: those named, those --reason/--since select (as for "
      "redrive), or ids from stdin, one a line; prints what it removed. Exit 66 if "
      "a named id was not found");
  del->add_option("QUEUE", delete_flags->queue, "Queue of the dead letters")->required();
  del->add_option("ID", delete_flags->ids,
                  "Message ids; none and no --reason/--since: read them from stdin, one a line");
  add_dead_filter_flags(del, delete_flags->filter);
  del->add_option("-n,--max", delete_flags->max, "Delete at most N")->type_name("N");
  add_destructive_flags(del, delete_flags->destructive);
  del->callback([delete_flags, &ctx] { run_delete(*delete_flags, ctx); });

  auto purge_flags = std::make_shared<EmptyQueueFlags>();
  auto* purge = dlq->add_subcommand("purge",
                                    "Discard every dead letter of a queue. Asks first "
                                    "on a terminal; the count goes to stderr");
  purge->add_option("QUEUE", purge_flags->queue, "Queue whose dead letters to discard")->required();
  add_destructive_flags(purge, purge_flags->destructive);
  purge->callback([purge_flags, &ctx] {
    const auto& f = *purge_flags;
    auto broker = ctx.open();
    auto dead = broker->stats(f.queue).at(0).dead;
    if (!may_destroy(
            f.destructive, ctx,
            {fmt::format("would purge {} from {}", q::plural(dead, "dead letter"), f.queue),
             fmt::format("purge {} from {}?", q::plural(dead, "dead letter"), f.queue),
             fmt::format("nothing was purged from {}", f.queue)}))
      return;
    auto removed = broker->purge_dead_letters(f.queue);
    print_error(fmt::format("purged {} from {}", q::plural(removed, "dead letter"), f.queue));
  });
}

}  // namespace cli
