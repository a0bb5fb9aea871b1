#include "libq/lmdb/history.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "libq/utf8.hpp"

namespace q {
namespace {

// Per attempt: long command lines are cut (the registry keeps it whole while
// q work runs).
constexpr std::size_t kMaxCommandLine = 256;

std::vector<Attempt> stored_history(Txn& txn, const store::Databases& db, std::uint64_t seq,
                                    const Header& header, const std::string& path) {
  if (!header.has_history) return {};
  auto bytes = txn.get(db.attempts, store::key_seq(seq));
  if (!bytes) return {};
  auto attempts = store::decode_attempts(*bytes);
  if (!attempts)
    throw Error(ErrorKind::Io,
                fmt::format("{}: the attempt history of message {} is damaged (checksum "
                            "mismatch; run 'q verify' or restore a backup)",
                            path, store::message_id(seq)));
  return std::move(*attempts);
}

}  // namespace

void close_attempt(QueueView& view, std::uint64_t seq, Header& header, AttemptEnd end, Millis at,
                   const std::string& reason, const RunReport& run) {
  if (header.holder_pid == 0) return;
  auto attempts = stored_history(view.txn, view.db, seq, header, view.txn.env().path());
  Attempt a;
  a.receive = header.receive_count;
  a.received_at = header.last_received_at;
  a.pid = header.holder_pid;
  a.worker_since = header.holder_since;
  // The command line is copied from q work's registry, which goes when q work ends.
  if (a.worker_since != 0)
    if (auto bytes = view.txn.get(view.db.workers, store::key_worker(a.pid, a.worker_since)))
      if (auto command = store::decode_worker(*bytes))
        a.command = std::string(utf8_prefix(*command, kMaxCommandLine));
  a.end = end;
  a.ended_at = at;
  a.reason = std::string(utf8_prefix(reason, kMaxReason));
  a.run.exit_status = run.exit_status;
  a.run.first_line = std::string(utf8_prefix(run.first_line, kMaxReason));
  a.run.stderr_tail = std::string(utf8_suffix(run.stderr_tail, kMaxStderrTail));
  attempts.push_back(std::move(a));
  if (attempts.size() > kMaxAttempts)
    attempts.erase(attempts.begin(), attempts.end() - static_cast<long>(kMaxAttempts));
  view.txn.put(view.db.attempts, store::key_seq(seq), store::encode(attempts));
  header.has_history = true;
  header.holder_pid = 0;
  header.holder_since = 0;
}

void close_lapsed(QueueView& view, std::uint64_t seq, Header& header) {
  if (header.holder_pid == 0) return;
  close_attempt(view, seq, header,
                header.holder_since != 0 ? AttemptEnd::HeartbeatLost : AttemptEnd::TimedOut,
                header.visible_at, {});
}

void open_attempt(Header& header, std::uint32_t pid, Millis worker_since) {
  header.holder_pid = pid != 0 ? pid : static_cast<std::uint32_t>(::getpid());
  header.holder_since = worker_since;
}

void drop_history(QueueView& view, std::uint64_t seq, const Header& header) {
  if (header.has_history) view.txn.del(view.db.attempts, store::key_seq(seq));
}

std::vector<Attempt> read_history(Txn& txn, const store::Databases& db, std::uint64_t seq,
                                  const Header& header, Millis now) {
  auto attempts = stored_history(txn, db, seq, header, txn.env().path());
  if (header.holder_pid != 0) {
    Attempt open;
    open.receive = header.receive_count;
    open.received_at = header.last_received_at;
    open.pid = header.holder_pid;
    open.worker_since = header.holder_since;
    // A lease that ran out is recorded by the next receive; show it as it is.
    if ((header.flags & Header::kLeased) && header.visible_at <= now) {
      open.end = header.holder_since != 0 ? AttemptEnd::HeartbeatLost : AttemptEnd::TimedOut;
      open.ended_at = header.visible_at;
    }
    attempts.push_back(std::move(open));
  }
  for (auto& a : attempts) {
    if (a.worker_since == 0 || !a.command.empty()) continue;
    auto bytes = txn.get(db.workers, store::key_worker(a.pid, a.worker_since));
    if (!bytes) continue;
    if (auto command = store::decode_worker(*bytes)) a.command = std::move(*command);
  }
  return attempts;
}

void register_worker(Txn& txn, const store::Databases& db, std::uint32_t pid, Millis since,
                     const std::string& command) {
  // Entries of q work processes that no longer run (killed, say) go now; a
  // reused pid keeps a stale entry until that process ends too.
  std::vector<std::string> gone;
  {
    store::Cursor c(txn, db.workers);
    for (bool ok = c.first(); ok; ok = c.next()) {
      auto other = static_cast<pid_t>(store::key_worker_pid(c.key()));
      if (::kill(other, 0) != 0 && errno == ESRCH) gone.emplace_back(c.key());
    }
  }
  for (const auto& key : gone) txn.del(db.workers, key);
  txn.put(db.workers, store::key_worker(pid, since),
          store::encode_worker(std::string(utf8_prefix(command, kMaxReason))));
}

void unregister_worker(Txn& txn, const store::Databases& db, std::uint32_t pid, Millis since) {
  txn.del(db.workers, store::key_worker(pid, since));
}

}  // namespace q
