#include "lmdb_broker.hpp"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>
#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "lmdb_verify.hpp"
#include "records.hpp"
#include "sha256.hpp"
#include "timefmt.hpp"
#include "utf8.hpp"

namespace q {
namespace {

using store::Cursor;
using store::Header;
using store::QueueRecord;
using store::Txn;

// Lazy clean-up of expired messages, dead letters and dedup entries rides on
// transactions that run anyway; the bound keeps any one of them short.
constexpr std::size_t kExpireBatch = 1000;
// Imported ids are kept only below this: next-seq must stay above every key
// and never wrap (2^52 is 140 years of sends at a million a second).
constexpr std::uint64_t kMaxKeptSeq = std::uint64_t{1} << 52;

// Sends of at least this many messages first commit a small change (see
// commit_small_change).
constexpr std::size_t kBulkSend = 1000;

std::string_view bytes_of(const std::uint64_t& v) {
  return {reinterpret_cast<const char*>(&v), sizeof v};
}

[[noreturn]] void no_such_queue(const std::string& queue) {
  throw Error(ErrorKind::NotFound,
              fmt::format("queue {}: no such queue (create it with 'q create {}')", queue, queue));
}

void check_queue_name(const std::string& queue) {
  if (!is_valid_queue_name(queue))
    throw Error(ErrorKind::Usage,
                fmt::format("queue name '{}': use 1 to {} letters, digits, '-', '_' or '.'", queue,
                            kMaxQueueName));
}

// One queue inside one transaction: its record, loaded once and saved at the end.
class QueueView {
 public:
  QueueView(Txn& txn, const store::Databases& db, std::string name, QueueRecord record,
            Millis now)
      : txn(txn), db(db), name(std::move(name)), rec(std::move(record)), now(now),
        prefix(store::key_q(rec.qid)) {}

  Txn& txn;
  const store::Databases& db;
  std::string name;
  QueueRecord rec;
  Millis now;
  std::string prefix;

  void save() { txn.put(db.queues, name, store::encode(rec)); }

  std::uint64_t depth() const { return rec.ready + rec.delayed + rec.leased; }

  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(ErrorKind::Io, fmt::format("{}: queue {}: {} (run 'q verify' or restore a backup)",
                                           txn.env().path(), name, what));
  }

  std::optional<Header> find_header(MDB_dbi dbi, std::uint64_t seq) {
    auto bytes = txn.get(dbi, store::key_q_seq(rec.qid, seq));
    if (!bytes) return std::nullopt;
    auto header = store::decode_header(*bytes);
    if (!header)
      corrupt(fmt::format("the record of message {} is damaged (checksum mismatch)",
                          store::message_id(seq)));
    return header;
  }

  store::Body body(std::uint64_t seq) {
    auto bytes = txn.get(db.bodies, store::key_seq(seq));
    if (!bytes) corrupt(fmt::format("the body of message {} is missing", store::message_id(seq)));
    auto body = store::decode_body(*bytes);
    if (!body)
      corrupt(fmt::format("the body of message {} is damaged (checksum mismatch)",
                          store::message_id(seq)));
    return std::move(*body);
  }

  void put_header(MDB_dbi dbi, std::uint64_t seq, const Header& header) {
    txn.put(dbi, store::key_q_seq(rec.qid, seq), store::encode(header));
  }

  // ---- the schedule: ready, delayed and leases indexes ----------------------

  // Files the message under its visible_at according to its flags.
  void link(std::uint64_t seq, Header& header) {
    if ((header.flags & Header::kDelayed) && header.visible_at <= now)
      header.flags &= static_cast<std::uint8_t>(~Header::kDelayed);
    auto key = store::key_q_time_seq(rec.qid, header.visible_at, seq);
    if (header.flags & Header::kLeased) {
      txn.put(db.leases, key, {});
      ++rec.leased;
    } else if (header.flags & Header::kDelayed) {
      txn.put(db.delayed, key, {});
      ++rec.delayed;
    } else {
      txn.put(db.ready, key, {});
      ++rec.ready;
    }
  }

  // Due lease and delay entries may already have moved to `ready`. Returns
  // true when the message was in flight (its lease had not run out).
  bool unlink(std::uint64_t seq, const Header& header) {
    auto key = store::key_q_time_seq(rec.qid, header.visible_at, seq);
    if ((header.flags & Header::kLeased) && txn.del(db.leases, key)) {
      --rec.leased;
      return true;
    }
    if ((header.flags & Header::kDelayed) && txn.del(db.delayed, key)) {
      --rec.delayed;
      return false;
    }
    if (txn.del(db.ready, key)) {
      --rec.ready;
      return false;
    }
    corrupt(fmt::format("message {} is missing from the schedule index", store::message_id(seq)));
  }

  // Moves due entries of `from` to `ready`; returns how many.
  std::uint64_t promote(MDB_dbi from) {
    auto due = due_keys(from);
    for (const auto& key : due) {
      // A FIFO message whose lease ran out no longer holds its group.
      std::optional<GroupEdit> group;
      if (from == db.leases && rec.config.fifo) {
        auto header = find_header(db.messages, store::key_time_seq(key));
        if (header) group.emplace(*this, header->group);
      }
      txn.del(from, key);
      txn.put(db.ready, key, {});
      if (group) {
        group->left_flight();
        group->done();
      }
    }
    return due.size();
  }

  // ---- FIFO message groups ----------------------------------------------------
  // Every change to a group goes through a GroupEdit: it takes the group's head
  // out of `heads` first (while no delivery of the group is in flight, its head
  // is there, keyed by its visible time) and offers the head, maybe a new one,
  // again when done. On a standard queue it does nothing.

  class GroupEdit {
   public:
    GroupEdit(QueueView& view, std::string group) : v_(view), group_(std::move(group)) {
      active_ = v_.rec.config.fifo;
      if (!active_) return;
      auto bytes = v_.txn.get(v_.db.groups, store::key_q_bytes(v_.rec.qid, group_));
      if (bytes) {
        auto decoded = store::decode_group(*bytes);
        if (!decoded) v_.corrupt(fmt::format("the record of group {} is damaged", group_));
        g_ = *decoded;
      }
      was_ = g_;
      if (g_.messages > 0 && g_.in_flight == 0) v_.head_entry(group_, false);
    }
    void added(std::uint64_t seq) {
      if (!active_) return;
      v_.txn.put(v_.db.group_messages, group_key(seq), {});
      ++g_.messages;
    }
    void removed(std::uint64_t seq) {
      if (!active_) return;
      v_.txn.del(v_.db.group_messages, group_key(seq));
      --g_.messages;
    }
    void took_flight() { ++g_.in_flight; }
    void left_flight() {
      if (g_.in_flight > 0) --g_.in_flight;
    }
    void done() {
      if (!active_) return;
      auto key = store::key_q_bytes(v_.rec.qid, group_);
      if (g_.messages == 0) {
        v_.txn.del(v_.db.groups, key);
      } else {
        v_.txn.put(v_.db.groups, key, store::encode(g_));
        if (g_.in_flight == 0) v_.head_entry(group_, true);
      }
      v_.rec.groups += (g_.messages > 0) - (was_.messages > 0);
      v_.rec.held_groups += (g_.in_flight > 0) - (was_.in_flight > 0);
      active_ = false;
    }

   private:
    std::string group_key(std::uint64_t seq) const {
      std::string k = store::key_group_prefix(v_.rec.qid, group_);
      k += store::key_seq(seq);
      return k;
    }
    QueueView& v_;
    std::string group_;
    store::GroupRecord g_, was_;
    bool active_ = false;
  };

  // Puts the group's head into `heads` (offer) or takes it out.
  void head_entry(const std::string& group, bool offer) {
    auto group_prefix = store::key_group_prefix(rec.qid, group);
    std::uint64_t seq;
    {
      Cursor c(txn, db.group_messages);
      if (!c.seek(group_prefix) || !c.has_prefix(group_prefix))
        corrupt(fmt::format("group {} has no messages in its index", group));
      seq = store::key_q_seq_seq(c.key().substr(group_prefix.size() - 4));
    }
    auto header = find_header(db.messages, seq);
    if (!header) corrupt(fmt::format("group {} lists a missing message", group));
    auto key = store::key_q_time_seq(rec.qid, header->visible_at, seq);
    if (offer)
      txn.put(db.heads, key, group);
    else
      txn.del(db.heads, key);
  }

  // ---- removal --------------------------------------------------------------

  // `open` is the caller's edit of the message's group, when it has one.
  void remove_live(std::uint64_t seq, const Header& header, GroupEdit* open = nullptr) {
    std::optional<GroupEdit> own;
    GroupEdit& group = open ? *open : own.emplace(*this, header.group);
    if (unlink(seq, header)) group.left_flight();
    group.removed(seq);
    txn.del(db.messages, store::key_q_seq(rec.qid, seq));
    txn.del(db.age, store::key_q_time_seq(rec.qid, header.available_at, seq));
    txn.del(db.bodies, store::key_seq(seq));
    if (own) own->done();
  }

  // Takes a dead letter out of the dead-letter queue; its body stays.
  void unfile_dead(std::uint64_t seq, const Header& header) {
    txn.del(db.dead, store::key_q_seq(rec.qid, seq));
    txn.del(db.dead_expiry, store::key_q_time_seq(rec.qid, header.dead_at, seq));
    --rec.dead;
  }

  void remove_dead(std::uint64_t seq, const Header& header) {
    unfile_dead(seq, header);
    txn.del(db.bodies, store::key_seq(seq));
  }

  void dead_letter(std::uint64_t seq, Header header, std::string reason,
                   GroupEdit* open = nullptr) {
    std::optional<GroupEdit> own;
    GroupEdit& group = open ? *open : own.emplace(*this, header.group);
    if (unlink(seq, header)) group.left_flight();
    group.removed(seq);
    if (own) own->done();
    txn.del(db.messages, store::key_q_seq(rec.qid, seq));
    txn.del(db.age, store::key_q_time_seq(rec.qid, header.available_at, seq));
    header.flags = 0;
    header.nonce = 0;
    header.dead_at = now;
    header.reason = std::move(reason);
    put_header(db.dead, seq, header);
    txn.put(db.dead_expiry, store::key_q_time_seq(rec.qid, now, seq), {});
    ++rec.dead;
    ++rec.counters.dead_lettered;
  }

  // A dead letter (taken out of its dead-letter queue) lives again in this queue.
  void revive(std::uint64_t seq, const Header& dead) {
    Header live;
    live.sent_at = dead.sent_at;
    live.visible_at = now;
    live.available_at = now;
    live.group = rec.config.fifo ? dead.group : std::string();
    // A FIFO message goes back into its group at its place in send order.
    GroupEdit group(*this, live.group);
    put_header(db.messages, seq, live);
    link(seq, live);
    group.added(seq);
    group.done();
    txn.put(db.age, store::key_q_time_seq(rec.qid, now, seq), {});
  }

  // ---- maintenance run by every write transaction on the queue ----------------

  void maintain() {
    auto leases_due = promote(db.leases);
    rec.leased -= leases_due;
    rec.ready += leases_due;
    auto delays_due = promote(db.delayed);
    rec.delayed -= delays_due;
    rec.ready += delays_due;
    if (auto budget = rate_budget())  // a future stored by a clock ahead is pulled back, once
      rec.rate_tat_us = static_cast<std::int64_t>(rate_tat(*budget, static_cast<double>(now) * 1000));
    expire_messages();
    expire_dead_letters();
    expire_keys(db.dedup_expiry, db.dedup, 8);  // value: seq, expires
    expire_keys(db.done_expiry, db.done, 0);    // value: expires
  }

  // ---- the shared rate budget (GCRA) --------------------------------------------
  // One start every 1/rate seconds, with a burst of a tenth of a second's
  // worth so fast queues need not take one message per transaction.

  struct RateBudget {
    double interval_us;
    double tolerance_us;
  };
  std::optional<RateBudget> rate_budget() const {
    if (rec.config.rate <= 0) return std::nullopt;
    double interval = 1e6 / rec.config.rate;
    return RateBudget{interval, interval * std::floor(rec.config.rate / 10)};
  }

  // The stored theoretical arrival time, never further ahead of now than one
  // full burst and one interval: a consumer whose clock ran ahead (or a clock
  // stepped back) must not make every other consumer wait for its future.
  double rate_tat(const RateBudget& budget, double now_us) const {
    double tat = std::max(static_cast<double>(rec.rate_tat_us), now_us);
    return std::min(tat, now_us + budget.tolerance_us + budget.interval_us);
  }

  // How many starts the budget allows now.
  std::uint64_t rate_allows() const {
    auto budget = rate_budget();
    if (!budget) return UINT64_MAX;
    double now_us = static_cast<double>(now) * 1000;
    double tat = rate_tat(*budget, now_us);
    if (tat > now_us + budget->tolerance_us) return 0;
    return static_cast<std::uint64_t>((now_us + budget->tolerance_us - tat) / budget->interval_us) + 1;
  }

  void rate_take(std::uint64_t starts) {
    auto budget = rate_budget();
    if (!budget || starts == 0) return;
    double now_us = static_cast<double>(now) * 1000;
    double tat = rate_tat(*budget, now_us);
    rec.rate_tat_us = static_cast<std::int64_t>(tat + budget->interval_us * static_cast<double>(starts));
  }

  // The first time the budget allows a start.
  Millis rate_ready_at() const {
    auto budget = rate_budget();
    if (!budget) return INT64_MIN;
    const double now_us = static_cast<double>(now) * 1000;
    // A stored future no consumer on this clock could have made: ready now,
    // so that the next write transaction pulls it back (see maintain()).
    if (static_cast<double>(rec.rate_tat_us) > now_us + budget->tolerance_us + budget->interval_us)
      return now;
    double at_us = rate_tat(*budget, now_us) - budget->tolerance_us;
    return static_cast<Millis>(std::ceil(at_us / 1000));
  }

  // Retention counts from the time a message first became available (its
  // send, the end of its delay, its redrive or import): the `age` index holds
  // exactly that time, so expired messages are a prefix of it, whatever the
  // order of their ids.
  void expire_messages() {
    std::vector<std::uint64_t> old;
    {
      Cursor c(txn, db.age);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && old.size() < kExpireBatch;
           ok = c.next()) {
        if (store::key_time(c.key()) + rec.config.retention > now) break;
        old.push_back(store::key_time_seq(c.key()));
      }
    }
    for (auto seq : old) {
      auto header = find_header(db.messages, seq);
      if (!header) corrupt(fmt::format("message {} is in the age index but missing",
                                       store::message_id(seq)));
      remove_live(seq, *header);
    }
    rec.counters.expired += old.size();
  }

  void expire_dead_letters() {
    std::vector<std::uint64_t> old;
    {
      Cursor c(txn, db.dead_expiry);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && old.size() < kExpireBatch;
           ok = c.next()) {
        if (store::key_time(c.key()) + kDeadLetterRetention > now) break;
        old.push_back(store::key_time_seq(c.key()));
      }
    }
    for (auto seq : old)
      if (auto header = find_header(db.dead, seq)) remove_dead(seq, *header);
    rec.counters.expired += old.size();
  }

  // Dedup ids and idempotency (done) keys past their time: their expiry
  // index is (qid, expires, key); the record's value holds its expiry at
  // `expires_at`, which a later renewal may have moved.
  void expire_keys(MDB_dbi expiry_index, MDB_dbi records, std::size_t expires_at) {
    for (const auto& key : due_keys(expiry_index, kExpireBatch)) {
      txn.del(expiry_index, key);
      auto record_key = store::key_q_bytes(rec.qid, store::key_time_bytes(key));
      auto entry = txn.get(records, record_key);
      if (entry && entry->size() == expires_at + 8) {
        Millis expires = 0;
        std::memcpy(&expires, entry->data() + expires_at, 8);
        if (expires <= now) txn.del(records, record_key);
      }
    }
  }

  // Keys of a (qid, time, ...) index whose time has come, oldest first.
  std::vector<std::string> due_keys(MDB_dbi index, std::size_t limit = SIZE_MAX) {
    std::vector<std::string> due;
    Cursor c(txn, index);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix) && due.size() < limit; ok = c.next()) {
      if (store::key_time(c.key()) > now) break;
      due.emplace_back(c.key());
    }
    return due;
  }

  // ---- dedup ------------------------------------------------------------------

  std::optional<std::uint64_t> find_dedup(const std::string& dedup_id) {
    auto entry = txn.get(db.dedup, store::key_q_bytes(rec.qid, dedup_id));
    if (!entry || entry->size() != 16) return std::nullopt;
    std::uint64_t seq = 0;
    Millis expires = 0;
    std::memcpy(&seq, entry->data(), 8);
    std::memcpy(&expires, entry->data() + 8, 8);
    if (expires <= now) return std::nullopt;
    return seq;
  }

  void remember_dedup(const std::string& dedup_id, std::uint64_t seq,
                      std::optional<Millis> until = std::nullopt) {
    Millis expires = until.value_or(now + rec.config.dedup_window);
    char value[16];
    std::memcpy(value, &seq, 8);
    std::memcpy(value + 8, &expires, 8);
    txn.put(db.dedup, store::key_q_bytes(rec.qid, dedup_id), {value, 16});
    txn.put(db.dedup_expiry, store::key_q_time_bytes(rec.qid, expires, dedup_id), {});
  }

  // ---- receipts -----------------------------------------------------------------

  struct Delivery {
    std::uint64_t seq;
    Header header;
  };

  // The current delivery a receipt names; throws Error(InvalidData or Stale).
  Delivery current_delivery(const std::string& receipt) {
    auto parsed = store::parse_receipt(receipt);
    if (!parsed)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("receipt '{}': malformed (expected the receipt printed by 'q "
                              "receive', like m1f.0123456789abcdef)",
                              receipt));
    auto header = find_header(db.messages, parsed->seq);
    auto id = store::message_id(parsed->seq);
    if (!header) {
      if (find_header(db.dead, parsed->seq))
        throw Error(ErrorKind::Stale, fmt::format("receipt {}: stale: message {} was moved to "
                                                  "the dead-letter queue of {}",
                                                  receipt, id, name));
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} is no longer in queue {} (acked, "
                              "purged or expired)",
                              receipt, id, name));
    }
    if (header->nonce != parsed->nonce) {
      if (header->nonce == 0)
        throw Error(ErrorKind::Stale,
                    fmt::format("receipt {}: stale: message {} was released (nack) after this "
                                "receipt was issued",
                                receipt, id));
      throw Error(ErrorKind::Stale,
                  fmt::format("receipt {}: stale: message {} was delivered again since (receive "
                              "count now {})",
                              receipt, id, header->receive_count));
    }
    return {parsed->seq, std::move(*header)};
  }
};

Message to_message(std::uint64_t seq, const Header& h, store::Body body, MessageState state) {
  Message m;
  m.id = store::message_id(seq);
  m.body = std::move(body.body);
  m.attributes = std::move(body.attributes);
  m.dedup_id = std::move(body.dedup_id);
  m.group = h.group;
  m.receive_count = h.receive_count;
  m.state = state;
  m.sent_at = h.sent_at;
  m.visible_at = h.visible_at;
  if (h.first_received_at) m.first_received_at = h.first_received_at;
  if (h.last_received_at) m.last_received_at = h.last_received_at;
  if (h.dead_at) m.dead_at = h.dead_at;
  m.reason = h.reason;
  return m;
}

MessageState state_of(const Header& h, Millis now) {
  if (h.visible_at <= now) return MessageState::Visible;
  if (h.flags & Header::kLeased) return MessageState::InFlight;
  return MessageState::Delayed;
}

// Wakes a long-polling receiver when any process has committed to the file:
// every q writer touches the file's times once its commit is visible to
// readers (Env::announce_commit), and inotify sees that from every process.
class FileWatch final : public ChangeWatch {
 public:
  explicit FileWatch(const std::string& path) {
    fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd_ >= 0 && inotify_add_watch(fd_, path.c_str(), IN_ATTRIB) < 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;

  int fd() const override { return fd_; }
  void drain() override {
    char buf[4096];
    while (fd_ >= 0 && ::read(fd_, buf, sizeof buf) > 0) {
    }
  }

  // Waits until the file changes or `ms` pass.
  void wait(Millis ms) {
    if (ms <= 0) return;
    if (fd_ < 0) {
      // No inotify (limits reached): fall back to a short poll.
      ::usleep(static_cast<useconds_t>(std::min<Millis>(ms, 50) * 1000));
      return;
    }
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<Millis>(ms, 60 * kSecond))) > 0) drain();
  }

 private:
  int fd_ = -1;
};

class LmdbBroker final : public Broker {
 public:
  LmdbBroker(std::unique_ptr<store::Env> env, const Clock* clock,
             std::function<std::uint64_t()> random)
      : env_(std::move(env)), clock_(clock ? clock : &system_clock_), random_(std::move(random)) {
    if (!random_) {
      std::random_device device;
      std::seed_seq seed{device(), device(), device(), device()};
      engine_.seed(seed);
      random_ = [this] { return engine_(); };
    }
  }

  bool create_queue(const std::string& queue, const ConfigChange& change) override {
    check_queue_name(queue);
    QueueConfig wanted = apply(QueueConfig{}, change);
    validate(wanted);
    Txn txn(*env_, Txn::Write);
    if (auto existing = load(txn, queue)) {
      check_agrees(queue, existing->config, change);
      return false;
    }
    QueueRecord rec;
    check_new_queue_name(queue);
    rec.qid = next_qid(txn);
    rec.created_at = clock_->now();
    rec.config = wanted;
    txn.put(db().queues, queue, store::encode(rec));
    txn.commit();
    return true;
  }

  QueueConfig configure(const std::string& queue, const ConfigChange& change) override {
    if (change.empty()) {
      Txn txn(*env_, Txn::Read);
      return must_load(txn, queue).config;
    }
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    if (change.fifo && *change.fifo != view.rec.config.fifo)
      throw Error(ErrorKind::Usage,
                  fmt::format("queue {}: is a {} queue, and a queue's kind cannot change; create "
                              "a new queue{} and move the messages",
                              queue, view.rec.config.fifo ? "FIFO" : "standard",
                              view.rec.config.fifo ? "" : " with --fifo"));
    QueueConfig config = apply(view.rec.config, change);
    validate(config);
    // The shared rate state belongs to the old rate: an hour's wait earned at
    // 1/h must not hold back starts at 100/s.
    if (config.rate != view.rec.config.rate) view.rec.rate_tat_us = 0;
    view.rec.config = config;
    view.save();
    txn.commit();
    return config;
  }

  RemovedCounts delete_queue(const std::string& queue) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    RemovedCounts removed;
    removed.messages = purge_live(view);
    removed.dead_letters = purge_dead(view);
    for (MDB_dbi dbi : {db().dedup, db().dedup_expiry, db().done, db().done_expiry, db().groups,
                        db().group_messages, db().heads}) {
      for (const auto& key : keys_with_prefix(txn, dbi, view.prefix)) txn.del(dbi, key);
    }
    txn.del(db().queues, queue);
    txn.commit();
    return removed;
  }

  std::vector<std::string> list_queues() override {
    Txn txn(*env_, Txn::Read);
    std::vector<std::string> names;
    Cursor c(txn, db().queues);
    for (bool ok = c.first(); ok; ok = c.next()) names.emplace_back(c.key());
    return names;
  }

  std::vector<SendResult> send(const std::string& queue, std::vector<OutgoingMessage> messages,
                               const SendOptions& options) override {
    check_queue_name(queue);
    for (const auto& m : messages) check_outgoing(queue, m);
    if (messages.size() >= kBulkSend) commit_small_change(queue);
    Txn txn(*env_, Txn::Write);
    auto existing = load(txn, queue);
    if (!existing) {
      if (!options.create_queue) no_such_queue(queue);
      QueueRecord rec;
      check_new_queue_name(queue);
      rec.qid = next_qid(txn);
      rec.created_at = clock_->now();
      existing = rec;
    }
    QueueView view(txn, db(), queue, std::move(*existing), clock_->now());
    view.maintain();
    const auto& config = view.rec.config;
    check_groups(queue, config, messages, options);
    if (config.content_dedup)
      for (auto& m : messages)
        if (m.dedup_id.empty()) m.dedup_id = sha256_hex(m.body);

    Millis visible_at = view.now + config.delay;
    if (options.delay) visible_at = view.now + *options.delay;
    if (options.at) visible_at = std::max(view.now, *options.at);
    if (visible_at - view.now >= config.retention)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("queue {}: a message visible at {} is further ahead than the "
                              "queue's retention ({})",
                              queue, format_time(visible_at), format_duration(config.retention)));

    std::size_t index = 0;
    for (const auto& m : messages) {
      ++index;
      if (m.body.size() > config.max_size)
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: message {} is {} bytes, over the queue's max size of "
                                "{} bytes; nothing was sent",
                                queue, index, m.body.size(), config.max_size));
    }

    // Duplicates of earlier sends, or of earlier messages of this batch, store nothing.
    std::vector<std::optional<std::uint64_t>> duplicate_of(messages.size());
    std::uint64_t fresh = 0;
    {
      std::unordered_set<std::string_view> in_batch;
      for (std::size_t i = 0; i < messages.size(); ++i) {
        const auto& dedup_id = messages[i].dedup_id;
        if (!dedup_id.empty()) {
          duplicate_of[i] = view.find_dedup(dedup_id);
          if (!duplicate_of[i] && !in_batch.insert(dedup_id).second) duplicate_of[i] = 0;
        }
        if (!duplicate_of[i]) ++fresh;
      }
    }
    if (config.max_depth != 0 && view.depth() + fresh > config.max_depth)
      throw Error(ErrorKind::Full,
                  fmt::format("queue {}: full ({} of max depth {} messages); {} more would not "
                              "fit, nothing was sent",
                              queue, view.depth(), config.max_depth, fresh));

    std::uint64_t seq = meta_u64(txn, store::kNextSeqKey);
    std::vector<SendResult> results;
    results.reserve(messages.size());
    std::unordered_map<std::string_view, std::uint64_t> batch_seq;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      auto& m = messages[i];
      if (duplicate_of[i]) {
        std::uint64_t first = *duplicate_of[i] != 0 ? *duplicate_of[i] : batch_seq.at(m.dedup_id);
        results.push_back({store::message_id(first), true});
        ++view.rec.counters.deduplicated;
        continue;
      }
      Header header;
      header.sent_at = view.now;
      header.visible_at = visible_at;
      header.available_at = visible_at;
      header.flags = visible_at > view.now ? Header::kDelayed : 0;
      header.group = m.group;
      QueueView::GroupEdit group(view, m.group);
      view.put_header(db().messages, seq, header);
      view.link(seq, header);
      group.added(seq);
      group.done();
      txn.put(db().age, store::key_q_time_seq(view.rec.qid, visible_at, seq), {});
      if (!m.dedup_id.empty()) {
        view.remember_dedup(m.dedup_id, seq);
        batch_seq.emplace(m.dedup_id, seq);
      }
      // Sequence numbers only grow, so bodies are always appended.
      store::Body body{std::move(m.attributes), m.dedup_id, std::move(m.body)};
      txn.put(db().bodies, store::key_seq(seq), store::encode(body), MDB_APPEND);
      results.push_back({store::message_id(seq), false});
      ++view.rec.counters.sent;
      ++seq;
    }
    set_meta_u64(txn, store::kNextSeqKey, seq);
    view.save();
    txn.commit();
    return results;
  }

  std::vector<Message> receive(const std::string& queue, const ReceiveOptions& options) override {
    check_queue_name(queue);
    if (options.visibility_timeout &&
        (*options.visibility_timeout < 0 || *options.visibility_timeout > kMaxVisibilityTimeout))
      throw Error(ErrorKind::Usage, "--visibility-timeout: must be between 0s and 12h");
    const Millis deadline = clock_->now() + std::max<Millis>(options.wait, 0);
    // Wait on the file's doorbell; watch the file itself only where the bell
    // cannot be had.
    store::Bell* bell = options.wait > 0 ? env_->bell() : nullptr;
    std::unique_ptr<FileWatch> watch;
    if (options.wait > 0 && !bell) watch = std::make_unique<FileWatch>(env_->path());
    for (;;) {
      std::uint32_t rings = bell ? bell->rings() : 0;  // before looking: no lost wake-up
      // Look first without the writer lock: an idle receiver must not write,
      // or every waiting receiver would wake every other one.
      Millis next_due = next_delivery(queue, options.rate_limited);
      Millis now = clock_->now();
      if (next_due <= now) {
        auto messages = receive_now(queue, options);
        if (!messages.empty()) return messages;
        // Another consumer was faster, or what was due went to the dead-letter queue.
      }
      now = clock_->now();
      if (now >= deadline || options.wait <= 0) return {};
      Millis sleep = std::min(deadline, next_due) - now;
      if (bell)
        bell->wait(rings, sleep);
      else
        watch->wait(sleep);
    }
  }

  Millis next_delivery(const std::string& queue, bool rate_limited) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    Millis earliest = INT64_MAX;
    // A FIFO queue delivers group heads; a lease running out frees a group.
    const bool fifo = view.rec.config.fifo;
    if (!fifo) {
      Cursor c(txn, db().ready);
      if (c.seek(view.prefix) && c.has_prefix(view.prefix)) earliest = INT64_MIN;
    }
    for (MDB_dbi dbi : {fifo ? db().heads : db().delayed, db().leases}) {
      Cursor c(txn, dbi);
      if (c.seek(view.prefix) && c.has_prefix(view.prefix))
        earliest = std::min(earliest, store::key_time(c.key()));
    }
    if (rate_limited && earliest != INT64_MAX) earliest = std::max(earliest, view.rate_ready_at());
    return earliest;
  }

  std::unique_ptr<ChangeWatch> watch() override {
    return std::make_unique<FileWatch>(env_->path());
  }

  void dead_letter(const std::string& queue, const std::string& receipt,
                   const std::string& reason) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto [seq, header] = view.current_delivery(receipt);
    view.dead_letter(seq, std::move(header), std::string(utf8_prefix(reason, kMaxReason)));
    view.save();
    txn.commit();
  }

  ReceiptOutcome ack_done(const std::string& queue, const std::string& receipt,
                          const std::string& key, Millis keep) override {
    check_idempotency_key(key);
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    try {
      auto delivery = view.current_delivery(receipt);
      view.remove_live(delivery.seq, delivery.header);
      ++view.rec.counters.acked;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Stale) throw;
      // The work was done all the same: record it, so a repeat is skipped.
      remember_done(view, key, keep);
      view.save();
      txn.commit();
      return ReceiptOutcome::Stale;
    }
    remember_done(view, key, keep);
    view.save();
    txn.commit();
    return ReceiptOutcome::Done;
  }

  bool is_done(const std::string& queue, const std::string& key) override {
    check_idempotency_key(key);
    Txn txn(*env_, Txn::Read);
    auto rec = must_load(txn, queue);
    auto entry = txn.get(db().done, store::key_q_bytes(rec.qid, key));
    if (!entry || entry->size() != 8) return false;
    Millis expires = 0;
    std::memcpy(&expires, entry->data(), 8);
    return expires > clock_->now();
  }

  std::vector<ReceiptResult> ack(const std::string& queue,
                                 const std::vector<std::string>& receipts) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    std::vector<ReceiptResult> results;
    // A receipt given twice is acked once and reported the same both times.
    std::unordered_map<std::string_view, std::size_t> first_result;
    for (const auto& receipt : receipts) {
      if (auto seen = first_result.find(receipt); seen != first_result.end()) {
        results.push_back(results[seen->second]);
        continue;
      }
      first_result.emplace(receipt, results.size());
      ReceiptResult result{receipt, ReceiptOutcome::Done, {}};
      try {
        auto delivery = view.current_delivery(receipt);
        view.remove_live(delivery.seq, delivery.header);
        ++view.rec.counters.acked;
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Stale && e.kind() != ErrorKind::InvalidData) throw;
        result.outcome =
            e.kind() == ErrorKind::Stale ? ReceiptOutcome::Stale : ReceiptOutcome::Malformed;
        result.detail = e.what();
      }
      results.push_back(std::move(result));
    }
    view.save();
    txn.commit();
    return results;
  }

  Millis extend(const std::string& queue, const std::string& receipt, Millis by) override {
    if (by < 0 || by > kMaxVisibilityTimeout)
      throw Error(ErrorKind::Usage, fmt::format("--by {}: must be between 0s and 12h",
                                                format_duration(by)));
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto [seq, header] = view.current_delivery(receipt);
    Millis until = view.now + by;
    Millis limit = header.last_received_at + kMaxVisibilityTimeout;
    if (until > limit)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("receipt {}: cannot extend to {}: a message may be held at most "
                              "12h after its receive (until {})",
                              receipt, format_time(until), format_time(limit)));
    QueueView::GroupEdit group(view, header.group);
    // A lease that ran out but was not redelivered is taken up again.
    if (!view.unlink(seq, header)) group.took_flight();
    header.visible_at = until;
    header.flags = Header::kLeased;
    view.link(seq, header);
    view.put_header(db().messages, seq, header);
    group.done();
    view.save();
    txn.commit();
    return until;
  }

  Millis nack(const std::string& queue, const std::string& receipt,
              const NackOptions& options) override {
    if (options.delay < 0 || options.delay > kMaxDelay)
      throw Error(ErrorKind::Usage, fmt::format("--delay {}: must be between 0s and 12h",
                                                format_duration(options.delay)));
    if (options.reason.size() > kMaxReason)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("--reason: {} bytes, at most {} are kept", options.reason.size(),
                              kMaxReason));
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    auto [seq, header] = view.current_delivery(receipt);
    Millis delay = options.delay;
    if (options.backoff) {
      double unit = static_cast<double>(random_() >> 11) * 0x1.0p-53;
      delay = backoff_delay(options.backoff_base, options.backoff_cap, header.receive_count, unit);
    }
    QueueView::GroupEdit group(view, header.group);
    if (view.unlink(seq, header)) group.left_flight();
    header.visible_at = view.now + delay;
    header.flags = delay > 0 ? Header::kDelayed : 0;
    header.nonce = 0;  // the receipt is spent
    if (!options.reason.empty()) header.reason = options.reason;
    view.link(seq, header);
    view.put_header(db().messages, seq, header);
    group.done();
    ++view.rec.counters.nacked;
    view.save();
    txn.commit();
    return header.visible_at;
  }

  std::vector<Message> peek(const std::string& queue, std::size_t max) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    std::vector<std::pair<std::uint64_t, Header>> found;
    {
      Cursor c(txn, db().messages);
      for (bool ok = c.seek(view.prefix); ok && c.has_prefix(view.prefix) && found.size() < max;
           ok = c.next()) {
        auto seq = store::key_q_seq_seq(c.key());
        auto header = store::decode_header(c.value());
        if (!header)
          view.corrupt(fmt::format("the record of message {} is damaged (checksum mismatch)",
                                   store::message_id(seq)));
        found.emplace_back(seq, std::move(*header));
      }
    }
    std::vector<Message> out;
    for (auto& [seq, header] : found)
      out.push_back(to_message(seq, header, view.body(seq), state_of(header, view.now)));
    return out;
  }

  std::uint64_t purge(const std::string& queue) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    auto removed = purge_live(view);
    view.save();
    txn.commit();
    return removed;
  }

  std::vector<QueueStats> stats(const std::string& queue) override {
    Txn txn(*env_, Txn::Read);
    Millis now = clock_->now();
    std::vector<QueueStats> out;
    auto add = [&](const std::string& name, const QueueRecord& rec) {
      out.push_back(queue_stats(txn, name, rec, now));
    };
    if (!queue.empty()) {
      add(queue, must_load(txn, queue));
      return out;
    }
    Cursor c(txn, db().queues);
    for (bool ok = c.first(); ok; ok = c.next()) {
      std::string name(c.key());
      auto rec = store::decode_queue(c.value());
      if (!rec) damaged_queue(name);
      add(name, *rec);
    }
    return out;
  }

  std::vector<Message> dead_letters(const std::string& queue, std::size_t max) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    std::vector<Message> out;
    for (auto& [seq, header] : dead_headers(view, max))
      out.push_back(to_message(seq, header, view.body(seq), MessageState::Dead));
    return out;
  }

  void each_dead_letter(const std::string& queue,
                        const std::function<bool(const Message&)>& each) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    Cursor c(txn, db().dead);
    for (bool ok = c.seek(view.prefix); ok && c.has_prefix(view.prefix); ok = c.next()) {
      auto seq = store::key_q_seq_seq(c.key());
      auto header = store::decode_header(c.value());
      if (!header)
        view.corrupt(fmt::format("the dead letter {} is damaged (checksum mismatch)",
                                 store::message_id(seq)));
      auto message = to_message(seq, *header, view.body(seq), MessageState::Dead);
      release_body(txn, seq);
      if (!each(message)) return;
    }
  }

  // A body copied out in a read transaction: its pages need not stay resident.
  void release_body(Txn& txn, std::uint64_t seq) {
    if (auto bytes = txn.get(db().bodies, store::key_seq(seq))) txn.release_read(*bytes);
  }

  std::uint64_t purge_dead_letters(const std::string& queue) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    auto removed = purge_dead(view);
    view.save();
    txn.commit();
    return removed;
  }

  std::vector<Message> redrive(const std::string& queue, const RedriveOptions& options) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    view.maintain();
    std::vector<std::pair<std::uint64_t, Header>> chosen;
    if (options.ids.empty()) {
      chosen = dead_headers(view, options.max.value_or(SIZE_MAX));
    } else {
      std::unordered_set<std::uint64_t> named;  // an id given twice moves once
      for (const auto& id : options.ids) {
        auto seq = store::parse_message_id(id);
        if (!seq)
          throw Error(ErrorKind::InvalidData,
                      fmt::format("--id {}: not a message id (like m1f)", id));
        if (!named.insert(*seq).second) continue;
        auto header = view.find_header(db().dead, *seq);
        if (!header) {
          if (options.skip_missing) continue;
          throw Error(ErrorKind::NotFound,
                      fmt::format("queue {}: no dead letter {}; nothing was redriven", queue, id));
        }
        if (options.max && chosen.size() >= *options.max) break;
        chosen.emplace_back(*seq, std::move(*header));
      }
    }
    std::vector<Message> out;
    for (auto& [seq, header] : chosen)
      out.push_back(to_message(seq, header, view.body(seq), MessageState::Dead));

    std::optional<QueueView> target;
    if (!options.to.empty() && options.to != queue) {
      target.emplace(txn, db(), options.to, must_load(txn, options.to), view.now);
      target->maintain();
    }
    QueueView& into = target ? *target : view;
    if (into.rec.config.fifo)
      for (const auto& [seq, header] : chosen)
        if (header.group.empty())
          throw Error(ErrorKind::InvalidData,
                      fmt::format("queue {}: is a FIFO queue and dead letter {} has no group; "
                                  "nothing was redriven",
                                  into.name, store::message_id(seq)));
    // A redriven message enters the target as a send would: the target's rules apply.
    for (const auto& m : out) {
      if (m.body.size() > into.rec.config.max_size)
        throw Error(ErrorKind::InvalidData,
                    fmt::format("queue {}: dead letter {} is {} bytes, over the queue's max size "
                                "of {} bytes; nothing was redriven",
                                into.name, m.id, m.body.size(), into.rec.config.max_size));
      // Stored attributes keep the form they were accepted in (older files
      // may hold repeated keys or bytes that are not UTF-8); what would make
      // the message unrunnable is refused.
      check_attribute_bytes(into.name, m.attributes);
    }
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

  std::optional<Message> find_dead_letter(const std::string& queue,
                                          const std::string& id) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    auto seq = store::parse_message_id(id);
    if (!seq)
      throw Error(ErrorKind::InvalidData, fmt::format("'{}': not a message id (like m1f)", id));
    auto header = view.find_header(db().dead, *seq);
    if (!header) return std::nullopt;
    return to_message(*seq, *header, view.body(*seq), MessageState::Dead);
  }

  std::vector<std::string> delete_dead_letters(const std::string& queue,
                                               const std::vector<std::string>& ids) override {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    std::vector<std::string> missing;
    std::unordered_set<std::uint64_t> named;  // an id given twice is deleted once
    for (const auto& id : ids) {
      auto seq = store::parse_message_id(id);
      if (!seq)
        throw Error(ErrorKind::InvalidData, fmt::format("'{}': not a message id (like m1f)", id));
      if (!named.insert(*seq).second) continue;
      auto header = view.find_header(db().dead, *seq);
      if (header)
        view.remove_dead(*seq, *header);
      else
        missing.push_back(id);
    }
    view.save();
    txn.commit();
    return missing;
  }

  void export_messages(const std::string& queue,
                       const std::function<void(const Message&)>& each) override {
    Txn txn(*env_, Txn::Read);
    QueueView view(txn, db(), queue, must_load(txn, queue), clock_->now());
    for (MDB_dbi dbi : {db().messages, db().dead}) {
      Cursor c(txn, dbi);
      for (bool ok = c.seek(view.prefix); ok && c.has_prefix(view.prefix); ok = c.next()) {
        auto seq = store::key_q_seq_seq(c.key());
        auto header = store::decode_header(c.value());
        if (!header)
          view.corrupt(fmt::format("the record of message {} is damaged (checksum mismatch)",
                                   store::message_id(seq)));
        auto state = dbi == db().dead ? MessageState::Dead : state_of(*header, view.now);
        auto message = to_message(seq, *header, view.body(seq), state);
        release_body(txn, seq);
        each(message);
      }
    }
  }

  std::vector<std::string> import_messages(const std::string& queue, std::vector<Message> messages,
                                           bool create_queue) override {
    check_queue_name(queue);
    Txn txn(*env_, Txn::Write);
    auto existing = load(txn, queue);
    if (!existing) {
      if (!create_queue) no_such_queue(queue);
      QueueRecord rec;
      check_new_queue_name(queue);
      rec.qid = next_qid(txn);
      rec.created_at = clock_->now();
      existing = rec;
    }
    QueueView view(txn, db(), queue, std::move(*existing), clock_->now());
    view.maintain();
    // A record whose id came before in this import is the same message again.
    std::vector<std::optional<std::size_t>> repeat_of(messages.size());
    {
      std::unordered_map<std::string_view, std::size_t> first;
      for (std::size_t i = 0; i < messages.size(); ++i)
        if (!messages[i].id.empty())
          if (auto [it, fresh] = first.emplace(messages[i].id, i); !fresh) repeat_of[i] = it->second;
    }
    std::uint64_t live = 0;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (repeat_of[i]) continue;
      check_imported(view, messages[i], i);
      live += messages[i].state != MessageState::Dead;
    }
    const auto& config = view.rec.config;
    if (config.max_depth != 0 && view.depth() + live > config.max_depth)
      throw Error(ErrorKind::Full,
                  fmt::format("queue {}: {} messages would not fit under max depth {}; nothing was "
                              "imported",
                              queue, live, config.max_depth));

    std::uint64_t next_seq = meta_u64(txn, store::kNextSeqKey);
    const bool keep_ids = ids_can_be_kept(txn, messages, repeat_of);
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (repeat_of[i]) {
        ids.push_back(ids[*repeat_of[i]]);
        continue;
      }
      std::uint64_t seq = keep_ids ? *store::parse_message_id(messages[i].id) : next_seq;
      next_seq = std::max(next_seq, seq + 1);
      store_imported(view, seq, std::move(messages[i]));
      ids.push_back(store::message_id(seq));
    }
    set_meta_u64(txn, store::kNextSeqKey, next_seq);
    view.save();
    txn.commit();
    return ids;
  }

  void backup(const std::string& path) override { env_->copy_to(path); }

  std::vector<std::string> verify() override {
    Txn txn(*env_, Txn::Read);
    return store::verify_file(txn, db(), clock_->now());
  }

 private:
  const store::Databases& db() const { return env_->db(); }

  // An import is checked as a send would be, plus its times: nothing can have
  // happened after now.
  void check_imported(QueueView& view, const Message& m, std::size_t index) {
    const auto& config = view.rec.config;
    auto where = fmt::format("queue {}: imported message {} ({})", view.name, index + 1, m.id);
    auto refuse = [&](const std::string& why) {
      throw Error(ErrorKind::InvalidData, fmt::format("{}: {}; nothing was imported", where, why));
    };
    if (m.body.size() > config.max_size)
      refuse(fmt::format("{} bytes, over the queue's max size of {}", m.body.size(),
                         config.max_size));
    if (config.fifo && m.group.empty()) refuse("has no group, and this is a FIFO queue");
    if (!config.fifo && !m.group.empty())
      refuse(fmt::format("has group '{}', and this is a standard queue", m.group));
    check_outgoing(view.name, {m.body, m.attributes, m.dedup_id, m.group});
    for (auto [field, time] : {std::pair{"sent_at", std::optional<Millis>(m.sent_at)},
                               std::pair{"first_received_at", m.first_received_at},
                               std::pair{"last_received_at", m.last_received_at},
                               std::pair{"dead_at", m.dead_at}})
      if (time && (*time < 0 || *time > view.now))
        refuse(fmt::format("{} {} is in the future (now {})", field, format_time(*time),
                           format_time(view.now)));
    if (m.state == MessageState::Delayed && m.visible_at - view.now >= config.retention)
      refuse(fmt::format("visible at {} is further ahead than the queue's retention ({})",
                         format_time(m.visible_at), format_duration(config.retention)));
  }

  // Imported messages keep their ids when every one of them can: each is a
  // message id, free in this file, and far from the end of the sequence space
  // (next-seq must stay above every id), and within each FIFO group they come
  // in send order. Otherwise all of them get new ids in the order given, so
  // that a group is never reordered by a mix of kept and new ids.
  bool ids_can_be_kept(Txn& txn, const std::vector<Message>& messages,
                       const std::vector<std::optional<std::size_t>>& repeat_of) {
    std::unordered_map<std::string_view, std::uint64_t> last_in_group;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (repeat_of[i]) continue;
      const auto& m = messages[i];
      auto seq = store::parse_message_id(m.id);
      if (!seq || *seq == 0 || *seq >= kMaxKeptSeq) return false;
      if (txn.get(db().bodies, store::key_seq(*seq))) return false;
      if (m.state == MessageState::Dead || m.group.empty()) continue;
      auto [it, fresh] = last_in_group.emplace(m.group, *seq);
      if (!fresh && *seq < it->second) return false;
      it->second = *seq;
    }
    return true;
  }

  // An imported live message is delivered like a new one: available now (or
  // when its delay ends), its retention counting from then.
  void store_imported(QueueView& view, std::uint64_t seq, Message m) {
    Txn& txn = view.txn;
    Header header;
    header.receive_count = m.receive_count;
    header.sent_at = m.sent_at;
    header.first_received_at = m.first_received_at.value_or(0);
    header.last_received_at = m.last_received_at.value_or(0);
    header.reason = std::string(utf8_prefix(m.reason, kMaxReason));
    header.group = m.group;
    if (m.state == MessageState::Dead) {
      header.dead_at = m.dead_at.value_or(view.now);
      view.put_header(db().dead, seq, header);
      txn.put(db().dead_expiry, store::key_q_time_seq(view.rec.qid, header.dead_at, seq), {});
      ++view.rec.dead;
    } else {
      bool delayed = m.state == MessageState::Delayed && m.visible_at > view.now;
      header.visible_at = delayed ? m.visible_at : view.now;
      header.available_at = header.visible_at;
      header.flags = delayed ? Header::kDelayed : 0;
      QueueView::GroupEdit group(view, header.group);
      view.put_header(db().messages, seq, header);
      view.link(seq, header);
      group.added(seq);
      group.done();
      txn.put(db().age, store::key_q_time_seq(view.rec.qid, header.available_at, seq), {});
      ++view.rec.counters.sent;
      // A dedup id still inside its window (counted from the original send)
      // recognises a repeat send after the migration.
      Millis dedup_until = m.sent_at + view.rec.config.dedup_window;
      if (!m.dedup_id.empty() && dedup_until > view.now && !view.find_dedup(m.dedup_id))
        view.remember_dedup(m.dedup_id, seq, dedup_until);
    }
    store::Body body{std::move(m.attributes), m.dedup_id, std::move(m.body)};
    txn.put(db().bodies, store::key_seq(seq), store::encode(body));
  }

  // LMDB never reuses in a transaction the pages the one before it freed (that
  // snapshot must survive a crash). A bulk send right after a drain would grow
  // the file by every page the drain's last ack freed; one small commit first
  // makes them reusable.
  void commit_small_change(const std::string& queue) {
    Txn txn(*env_, Txn::Write);
    auto rec = load(txn, queue);
    if (!rec) return;
    QueueView view(txn, db(), queue, std::move(*rec), clock_->now());
    view.maintain();
    view.save();
    txn.commit();
  }

  std::optional<QueueRecord> load(Txn& txn, const std::string& queue) {
    check_queue_name(queue);
    auto bytes = txn.get(db().queues, queue);
    if (!bytes) return std::nullopt;
    auto rec = store::decode_queue(*bytes);
    if (!rec) damaged_queue(queue);
    return rec;
  }

  QueueRecord must_load(Txn& txn, const std::string& queue) {
    auto rec = load(txn, queue);
    if (!rec) no_such_queue(queue);
    return std::move(*rec);
  }

  QueueView open(Txn& txn, const std::string& queue) {
    return QueueView(txn, db(), queue, must_load(txn, queue), clock_->now());
  }

  [[noreturn]] void damaged_queue(const std::string& queue) const {
    throw Error(ErrorKind::Io,
                fmt::format("{}: queue {}: its record is damaged (checksum mismatch)",
                            env_->path(), queue));
  }

  void check_agrees(const std::string& queue, const QueueConfig& have,
                    const ConfigChange& change) {
    auto differs = [&](const char* flag, auto want, auto is, auto show) {
      if (want && *want != is)
        throw Error(ErrorKind::Usage,
                    fmt::format("queue {}: already exists with {} {}; change it with 'q config {} "
                                "{} {}'",
                                queue, flag, show(is), queue, flag, show(*want)));
    };
    auto dur = [](Millis v) { return format_duration(v); };
    auto num = [](auto v) { return fmt::format("{}", v); };
    differs("--visibility-timeout", change.visibility_timeout, have.visibility_timeout, dur);
    differs("--max-receives", change.max_receives, have.max_receives, num);
    differs("--retention", change.retention, have.retention, dur);
    differs("--delay", change.delay, have.delay, dur);
    differs("--max-depth", change.max_depth, have.max_depth, num);
    differs("--max-size", change.max_size, have.max_size, num);
    differs("--dedup-window", change.dedup_window, have.dedup_window, dur);
    differs("--rate", change.rate, have.rate, [](double v) { return fmt::format("{}/s", v); });
    if (change.fifo && *change.fifo != have.fifo)
      throw Error(ErrorKind::Usage,
                  fmt::format("queue {}: already exists as a {} queue, and a queue's kind cannot "
                              "change",
                              queue, have.fifo ? "FIFO" : "standard"));
    auto flag = [](bool v) { return v ? "on" : "off"; };
    differs("--content-dedup", change.content_dedup, have.content_dedup, flag);
  }

  static void check_idempotency_key(const std::string& key) {
    if (key.empty() || key.size() > kMaxIdempotencyKey)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("idempotency key of {} bytes: must be 1 to {}", key.size(),
                              kMaxIdempotencyKey));
  }

  void remember_done(QueueView& view, const std::string& key, Millis keep) {
    Millis expires = view.now + keep;
    auto done_key = store::key_q_bytes(view.rec.qid, key);
    if (auto old = view.txn.get(db().done, done_key); old && old->size() == 8) {
      Millis old_expires = 0;
      std::memcpy(&old_expires, old->data(), 8);
      view.txn.del(db().done_expiry, store::key_q_time_bytes(view.rec.qid, old_expires, key));
    }
    view.txn.put(db().done, done_key, {reinterpret_cast<const char*>(&expires), 8});
    view.txn.put(db().done_expiry, store::key_q_time_bytes(view.rec.qid, expires, key), {});
  }

  static void check_groups(const std::string& queue, const QueueConfig& config,
                           const std::vector<OutgoingMessage>& messages,
                           const SendOptions& options) {
    for (const auto& m : messages) {
      if (!config.fifo && !m.group.empty())
        throw Error(ErrorKind::Usage,
                    fmt::format("queue {}: --group applies to FIFO queues only (this one is "
                                "standard)",
                                queue));
      if (config.fifo && m.group.empty())
        throw Error(ErrorKind::Usage,
                    fmt::format("queue {}: is a FIFO queue: every message needs --group ID", queue));
      if (m.group.size() > kMaxGroupId ||
          !std::all_of(m.group.begin(), m.group.end(),
                       [](unsigned char c) { return c > 0x20 && c < 0x7F; }))
        throw Error(ErrorKind::InvalidData,
                    fmt::format("--group '{}': use 1 to {} printable ASCII characters, no spaces",
                                m.group, kMaxGroupId));
    }
    if (config.fifo && (options.delay || options.at))
      throw Error(ErrorKind::Usage,
                  fmt::format("queue {}: a FIFO queue delivers each group in send order, so one "
                              "message cannot be delayed on its own (as in SQS); set the queue's "
                              "--delay instead",
                              queue));
  }

  void check_outgoing(const std::string& queue, const OutgoingMessage& m) {
    check_attributes(queue, m.attributes);
    check_attribute_bytes(queue, m.attributes);
    if (m.dedup_id.size() > kMaxDedupId)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("queue {}: --dedup-id is {} bytes, at most {}", queue,
                              m.dedup_id.size(), kMaxDedupId));
  }

  // q work hands attributes to its command as environment variables, and
  // execve refuses one over 128 KiB (E2BIG): a message must stay runnable.
  static void check_attribute_bytes(const std::string& queue, const Attributes& attributes) {
    std::size_t bytes = 0;
    for (const auto& [key, value] : attributes) bytes += key.size() + value.size();
    if (bytes > kMaxAttributeBytes)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("queue {}: attributes of {} bytes (keys and values), at most {}",
                              queue, bytes, kMaxAttributeBytes));
  }

  std::uint32_t next_qid(Txn& txn) {
    auto bytes = txn.get(db().meta, store::kNextQidKey);
    std::uint32_t qid = 1;
    if (bytes && bytes->size() == 4) std::memcpy(&qid, bytes->data(), 4);
    std::uint32_t next = qid + 1;
    txn.put(db().meta, store::kNextQidKey, {reinterpret_cast<const char*>(&next), 4});
    return qid;
  }

  std::uint64_t meta_u64(Txn& txn, const char* key) {
    auto bytes = txn.get(db().meta, key);
    std::uint64_t v = 1;
    if (bytes && bytes->size() == 8) std::memcpy(&v, bytes->data(), 8);
    return v;
  }

  void set_meta_u64(Txn& txn, const char* key, std::uint64_t v) {
    txn.put(db().meta, key, bytes_of(v));
  }

  static std::vector<std::string> keys_with_prefix(Txn& txn, MDB_dbi dbi,
                                                   const std::string& prefix) {
    std::vector<std::string> keys;
    Cursor c(txn, dbi);
    for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next())
      keys.emplace_back(c.key());
    return keys;
  }

  std::vector<std::pair<std::uint64_t, Header>> dead_headers(QueueView& view, std::size_t max) {
    std::vector<std::pair<std::uint64_t, Header>> found;
    Cursor c(view.txn, db().dead);
    for (bool ok = c.seek(view.prefix); ok && c.has_prefix(view.prefix) && found.size() < max;
         ok = c.next()) {
      auto seq = store::key_q_seq_seq(c.key());
      auto header = store::decode_header(c.value());
      if (!header)
        view.corrupt(fmt::format("the dead letter {} is damaged (checksum mismatch)",
                                 store::message_id(seq)));
      found.emplace_back(seq, std::move(*header));
    }
    return found;
  }

  std::uint64_t purge_live(QueueView& view) {
    std::vector<std::pair<std::uint64_t, Header>> all;
    {
      Cursor c(view.txn, db().messages);
      for (bool ok = c.seek(view.prefix); ok && c.has_prefix(view.prefix); ok = c.next()) {
        auto header = store::decode_header(c.value());
        if (!header)
          view.corrupt(fmt::format("the record of message {} is damaged (checksum mismatch)",
                                   store::message_id(store::key_q_seq_seq(c.key()))));
        all.emplace_back(store::key_q_seq_seq(c.key()), std::move(*header));
      }
    }
    for (const auto& [seq, header] : all) view.remove_live(seq, header);
    return all.size();
  }

  std::uint64_t purge_dead(QueueView& view) {
    auto all = dead_headers(view, SIZE_MAX);
    for (const auto& [seq, header] : all) view.remove_dead(seq, header);
    return all.size();
  }

  // Counts of a queue as of `now`: the record's counts are as of its last write
  // transaction, so entries of `leases` and `delayed` that have come due since
  // are counted as visible. Every write moves them, so this stays short.
  QueueStats queue_stats(Txn& txn, const std::string& name, const QueueRecord& rec, Millis now) {
    auto prefix = store::key_q(rec.qid);
    // FIFO: leases that ran out, per group; a group whose every delivery in
    // flight ran out is no longer held.
    std::unordered_map<std::string, std::uint64_t> lapsed_in_group;
    auto count_due = [&](MDB_dbi dbi) {
      std::uint64_t n = 0;
      Cursor c(txn, dbi);
      for (bool ok = c.seek(prefix); ok && c.has_prefix(prefix); ok = c.next()) {
        if (store::key_time(c.key()) > now) break;
        ++n;
        if (dbi != db().leases || !rec.config.fifo) continue;
        auto header = txn.get(db().messages, store::key_q_seq(rec.qid, store::key_time_seq(c.key())));
        if (auto decoded = header ? store::decode_header(*header) : std::nullopt)
          ++lapsed_in_group[decoded->group];
      }
      return n;
    };
    QueueStats s;
    s.name = name;
    s.config = rec.config;
    s.created_at = rec.created_at;
    s.counters = rec.counters;
    auto leases_due = std::min(count_due(db().leases), rec.leased);
    auto delays_due = std::min(count_due(db().delayed), rec.delayed);
    s.visible = rec.ready + leases_due + delays_due;
    s.in_flight = rec.leased - leases_due;
    s.delayed = rec.delayed - delays_due;
    s.dead = rec.dead;
    s.groups = rec.groups;
    s.held_groups = rec.held_groups;
    for (const auto& [group, lapsed] : lapsed_in_group) {
      auto bytes = txn.get(db().groups, store::key_q_bytes(rec.qid, group));
      auto g = bytes ? store::decode_group(*bytes) : std::nullopt;
      if (g && g->in_flight > 0 && lapsed >= g->in_flight && s.held_groups > 0) --s.held_groups;
    }
    Cursor age(txn, db().age);
    if (age.seek(prefix) && age.has_prefix(prefix)) {
      Millis available = store::key_time(age.key());
      if (available <= now) s.oldest_age = now - available;
    }
    return s;
  }


  std::vector<Message> receive_now(const std::string& queue, const ReceiveOptions& options) {
    Txn txn(*env_, Txn::Write);
    auto view = open(txn, queue);
    const std::string before = store::encode(view.rec);
    view.maintain();
    const auto& config = view.rec.config;
    Millis timeout = options.visibility_timeout.value_or(config.visibility_timeout);
    std::uint64_t budget = options.rate_limited ? view.rate_allows() : UINT64_MAX;
    std::uint64_t want = std::min<std::uint64_t>(options.max_messages, budget);
    std::vector<Message> out;
    // Delivers `seq` unless it has used up its receives; false when it went to
    // the dead-letter queue instead.
    auto deliver = [&](std::uint64_t seq, Header header, QueueView::GroupEdit* group) {
      if (config.max_receives != 0 && header.receive_count >= config.max_receives) {
        std::string reason =
            header.reason.empty()
                ? "not acknowledged after " + plural(header.receive_count, "receive")
                : header.reason;
        view.dead_letter(seq, std::move(header), std::move(reason), group);
        return false;
      }
      view.unlink(seq, header);
      header.receive_count += 1;
      std::uint64_t nonce;
      do nonce = random_(); while (nonce == 0);
      header.nonce = nonce;
      if (!header.first_received_at) header.first_received_at = view.now;
      header.last_received_at = view.now;
      header.visible_at = view.now + timeout;
      header.flags = Header::kLeased;
      view.link(seq, header);
      view.put_header(db().messages, seq, header);
      if (group) group->took_flight();
      ++view.rec.counters.received;
      Message m = to_message(seq, header, view.body(seq), MessageState::InFlight);
      m.receipt = store::receipt(seq, nonce);
      out.push_back(std::move(m));
      return true;
    };
    auto must_header = [&](std::uint64_t seq) {
      auto header = view.find_header(db().messages, seq);
      if (!header)
        view.corrupt(fmt::format("message {} is indexed but has no record", store::message_id(seq)));
      return std::move(*header);
    };

    if (!config.fifo) {
      while (out.size() < want) {
        std::uint64_t seq;
        {
          Cursor c(txn, db().ready);
          if (!c.seek(view.prefix) || !c.has_prefix(view.prefix)) break;
          seq = store::key_time_seq(c.key());
        }
        deliver(seq, must_header(seq), nullptr);
      }
    }
    // FIFO: messages in order of visible time and send order, from the heads
    // of groups not held and, within this receive, from the groups already
    // taken from (one receive may take several of a group, in order). Each
    // group stays in order, and the oldest work goes first.
    if (config.fifo) {
      struct Next {
        Millis visible_at;
        std::uint64_t seq;
        std::string group;
      };
      auto later = [](const Next& a, const Next& b) {
        return std::tie(a.visible_at, a.seq) > std::tie(b.visible_at, b.seq);
      };
      std::priority_queue<Next, std::vector<Next>, decltype(later)> continuing(later);
      std::map<std::string, QueueView::GroupEdit> taken;
      auto follow = [&](const std::string& group, std::uint64_t seq) {
        if (options.one_per_group) return;
        auto group_prefix = store::key_group_prefix(view.rec.qid, group);
        std::uint64_t next;
        {
          Cursor c(txn, db().group_messages);
          if (!c.seek(group_prefix + store::key_seq(seq + 1)) || !c.has_prefix(group_prefix))
            return;
          next = store::key_q_seq_seq(c.key().substr(group_prefix.size() - 4));
        }
        Millis visible_at = must_header(next).visible_at;
        if (visible_at <= view.now) continuing.push({visible_at, next, group});
      };
      while (out.size() < want) {
        std::optional<Next> head;
        {
          Cursor c(txn, db().heads);
          if (c.seek(view.prefix) && c.has_prefix(view.prefix) &&
              store::key_time(c.key()) <= view.now)
            head = Next{store::key_time(c.key()), store::key_time_seq(c.key()),
                        std::string(c.value())};
        }
        bool from_head = head && (continuing.empty() || !later(*head, continuing.top()));
        if (!from_head && continuing.empty()) break;
        Next pick = from_head ? std::move(*head) : continuing.top();
        if (!from_head) continuing.pop();
        auto edit = taken.find(pick.group);
        if (edit == taken.end())
          edit = taken
                     .emplace(std::piecewise_construct, std::forward_as_tuple(pick.group),
                              std::forward_as_tuple(view, pick.group))
                     .first;
        deliver(pick.seq, must_header(pick.seq), &edit->second);
        follow(pick.group, pick.seq);
      }
      for (auto& [group, edit] : taken) edit.done();
    }
    if (options.rate_limited) view.rate_take(out.size());
    // Another consumer was faster: when nothing moved, commit nothing. A
    // durable commit costs a sync and wakes every waiting receiver. (Expired
    // dedup or done keys that maintain() dropped are dropped again next time.)
    if (out.empty() && store::encode(view.rec) == before) return out;
    view.save();
    txn.commit();
    return out;
  }

  std::unique_ptr<store::Env> env_;
  SystemClock system_clock_;
  const Clock* clock_;
  std::function<std::uint64_t()> random_;
  std::mt19937_64 engine_;
};

}  // namespace

std::unique_ptr<Broker> open_lmdb_broker(const LmdbOptions& options) {
  auto env = store::Env::open(options.open);
  return std::make_unique<LmdbBroker>(std::move(env), options.clock, options.random);
}

}  // namespace q
