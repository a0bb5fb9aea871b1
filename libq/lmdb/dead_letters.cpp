// The LMDB backend: dead letters (list, show, redrive, delete) and purges.
#include "libq/lmdb/broker_impl.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "libq/lmdb/history.hpp"
#include "libq/rules.hpp"

namespace q {

std::vector<Message> LmdbBroker::do_dead_letters(const std::string& queue, std::size_t max) {
  Txn txn(*env_, Txn::Read);
  QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
  std::vector<Message> out;
  for (auto& [seq, header] : dead_headers(view, max))
    out.push_back(to_message(seq, header, view.body(seq), MessageState::Dead));
  return out;
}

void LmdbBroker::do_each_dead_letter(const std::string& queue,
                                     const std::function<bool(const Message&)>& each) {
  Txn txn(*env_, Txn::Read);
  QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
  view.each_header(db().dead, "the dead letter", [&](std::uint64_t seq, const Header& header) {
    auto message = to_message(seq, header, view.body(seq), MessageState::Dead);
    message.attempts = read_history(txn, db(), seq, header, view.now);
    view.release_body(seq);
    return each(message);
  });
}

std::vector<Message> LmdbBroker::do_redrive(const std::string& queue,
                                            const RedriveOptions& options) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  view.maintain();
  auto chosen = redrive_choice(view, options);
  std::vector<Message> out;
  for (auto& [seq, header] : chosen)
    out.push_back(to_message(seq, header, view.body(seq), MessageState::Dead));

  std::optional<QueueView> target;
  if (!options.to.empty() && options.to != queue) {
    target.emplace(txn, db(), options.to, must_load(txn, options.to), view.now);
    target->maintain();
  }
  QueueView& into = target ? *target : view;
  check_redrivable(into, chosen, out);
  if (options.dry_run) return out;

  const auto& config = into.rec.config;
  if (config.max_depth != 0 && into.depth() + chosen.size() > config.max_depth)
    throw Error(ErrorKind::Full,
                fmt::format("queue {}: {} dead letters would not fit under max depth {} ({} "
                            "waiting); nothing was redriven (try --max)",
                            into.name, chosen.size(), config.max_depth, into.depth()));
  for (auto& [seq, header] : chosen) {
    view.unfile_dead(seq, header);
    into.revive(seq, header);
    ++view.rec.counters.redriven;
  }
  view.save();
  if (target) target->save();
  txn.commit();
  return out;
}

std::vector<std::pair<std::uint64_t, Header>> LmdbBroker::redrive_choice(
    QueueView& view, const RedriveOptions& options) {
  if (options.ids.empty()) return dead_headers(view, options.max.value_or(SIZE_MAX));
  std::vector<std::pair<std::uint64_t, Header>> chosen;
  std::unordered_set<std::uint64_t> named;  // an id given twice moves once
  for (const auto& id : options.ids) {
    auto seq = parse_id(id, "id");
    if (!named.insert(seq).second) continue;
    auto header = view.find_header(db().dead, seq);
    if (!header) {
      if (options.skip_missing) continue;
      throw Error(ErrorKind::NotFound,
                  fmt::format("queue {}: no dead letter {}; nothing was redriven", view.name, id));
    }
    if (options.max && chosen.size() >= *options.max) break;
    chosen.emplace_back(seq, std::move(*header));
  }
  return chosen;
}

void LmdbBroker::check_redrivable(const QueueView& into,
                                  const std::vector<std::pair<std::uint64_t, Header>>& chosen,
                                  const std::vector<Message>& out) {
  if (into.rec.config.fifo)
    for (const auto& [seq, header] : chosen)
      if (header.group.empty())
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: is a FIFO queue and dead letter {} has no group; "
                                "nothing was redriven",
                                into.name, store::message_id(seq)));
  for (const auto& m : out) {
    check_body_size(into.name, into.rec.config, m.body.size(), "dead letter " + m.id, "redriven");
    // Stored attributes keep the form they were accepted in (older files
    // may hold repeated keys or bytes that are not UTF-8); what would make
    // the message unrunnable is refused.
    check_attribute_bytes(into.name, m.attributes);
  }
}

std::optional<Message> LmdbBroker::do_find_dead_letter(const std::string& queue,
                                                       const std::string& id) {
  Txn txn(*env_, Txn::Read);
  QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
  auto seq = parse_id(id);
  auto header = view.find_header(db().dead, seq);
  if (!header) return std::nullopt;
  auto m = to_message(seq, *header, view.body(seq), MessageState::Dead);
  m.attempts = read_history(txn, db(), seq, *header, view.now);
  return m;
}

std::vector<std::string> LmdbBroker::do_delete_dead_letters(const std::string& queue,
                                                            const std::vector<std::string>& ids) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  std::vector<std::string> missing;
  std::unordered_set<std::uint64_t> named;  // an id given twice is deleted once
  for (const auto& id : ids) {
    auto seq = parse_id(id);
    if (!named.insert(seq).second) continue;
    auto header = view.find_header(db().dead, seq);
    if (header)
      view.remove_dead(seq, *header);
    else
      missing.push_back(id);
  }
  view.save();
  txn.commit();
  return missing;
}

std::vector<std::pair<std::uint64_t, Header>> LmdbBroker::dead_headers(QueueView& view,
                                                                       std::size_t max) {
  return view.headers(db().dead, "the dead letter", max);
}

std::uint64_t LmdbBroker::purge_with(const std::string& queue,
                                     std::uint64_t (LmdbBroker::*remove)(QueueView&)) {
  Txn txn(*env_, Txn::Write);
  auto view = open(txn, queue);
  auto removed = (this->*remove)(view);
  view.save();
  txn.commit();
  return removed;
}

std::uint64_t LmdbBroker::purge_live(QueueView& view) {
  auto all = view.headers(db().messages, "the record of message");
  for (const auto& [seq, header] : all) view.remove_live(seq, header);
  return all.size();
}

std::uint64_t LmdbBroker::purge_dead(QueueView& view) {
  auto all = dead_headers(view, SIZE_MAX);
  for (const auto& [seq, header] : all) view.remove_dead(seq, header);
  return all.size();
}

}  // namespace q
