// Internal to libq: the LMDB backend's Broker. Its methods live in files by
// concern: queues, sends and the file's counters (lmdb/broker.cpp); receive,
// ack, nack, extend (lmdb/deliveries.cpp); dead letters and purges
// (lmdb/dead_letters.cpp); peek, stats, show (lmdb/inspect.cpp); export and
// import (lmdb/transfer.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "libq/broker.hpp"
#include "libq/holder.hpp"
#include "libq/lmdb/store.hpp"
#include "libq/lmdb/queue_view.hpp"

namespace q {

class LmdbBroker final : public Broker {
 public:
  LmdbBroker(std::unique_ptr<store::Env> env, const Clock* clock,
             std::function<std::uint64_t()> random, HolderProbe holder_alive)
      : env_(std::move(env)),
        clock_(clock ? clock : &system_clock_),
        random_(std::move(random)),
        holder_alive_(holder_alive ? std::move(holder_alive) : HolderProbe(q::holder_alive)) {
    if (!random_) {
      std::random_device device;
      std::seed_seq seed{device(), device(), device(), device()};
      engine_.seed(seed);
      random_ = [this] { return engine_(); };
    }
  }

  Capabilities do_capabilities() override {
    Capabilities c;
    c.all_or_nothing = true;  // every operation is one LMDB write transaction
    return c;
  }
  bool do_create_queue(const std::string& queue, const ConfigChange& change) override;

  QueueConfig do_configure(const std::string& queue, const ConfigChange& change) override;

  RemovedCounts do_delete_queue(const std::string& queue) override;

  std::vector<std::string> do_list_queues() override;

  std::vector<SendResult> do_send(const std::string& queue, std::vector<OutgoingMessage> messages,
                                  const SendOptions& options) override;

  // A send inside the caller's write transaction (send, ack_and_send).
  std::vector<SendResult> send_in(Txn& txn, const std::string& queue,
                                  std::vector<OutgoingMessage> messages,
                                  const SendOptions& options);

  // Acks one delivery inside `view`'s transaction; a stale or malformed
  // receipt is an outcome (nothing written), not an exception.
  static ReceiptResult ack_in(QueueView& view, const std::string& receipt);

  AckSendResult do_ack_and_send(const std::string& queue, const std::string& receipt,
                                const std::string& to, std::vector<OutgoingMessage> messages,
                                const SendOptions& options) override;

  std::vector<AckSendResult> do_ack_and_send_each(const std::string& queue, const std::string& to,
                                                  std::vector<StageStep> steps,
                                                  const SendOptions& options) override;

  std::vector<Message> do_receive(const std::string& queue, const ReceiveOptions& options) override;

  void do_sync() override { env_->sync(); }

  Millis do_next_delivery(const std::string& queue, bool rate_limited) override;

  std::unique_ptr<ChangeWatch> do_watch() override;

  void do_dead_letter(const std::string& queue, const std::string& receipt,
                      const std::string& reason, const RunReport& run) override;

  ReceiptOutcome do_ack_done(const std::string& queue, const std::string& receipt,
                             const std::string& key, Millis keep) override;

  bool do_is_done(const std::string& queue, const std::string& key) override;

  std::vector<ReceiptResult> do_ack(const std::string& queue,
                                    const std::vector<std::string>& receipts) override;

  // A receipt given twice is acked once and reported the same both times.
  static std::vector<ReceiptResult> ack_each(QueueView& view,
                                             const std::vector<std::string>& receipts);

  // The acks first: an ack that frees a FIFO group lets this receive take
  // the group's next message.
  AckReceiveResult do_ack_and_receive(const std::string& queue,
                                      const std::vector<std::string>& receipts,
                                      const ReceiveOptions& options) override;

  Millis do_extend(const std::string& queue, const std::string& receipt, Millis by) override;

  NackResult do_nack(const std::string& queue, const std::string& receipt,
                     const NackOptions& options) override;

  void do_pause(const std::string& queue, Millis until, const std::string& reason) override;

  std::optional<Pause> do_resume(const std::string& queue) override;

  std::vector<Message> do_peek(const std::string& queue, std::size_t max) override;

  std::uint64_t do_purge(const std::string& queue) override {
    return purge_with(queue, &LmdbBroker::purge_live);
  }

  std::vector<QueueStats> do_stats(const std::string& queue) override;
  std::optional<QueueConfig> do_queue_config(const std::string& queue) override;

  std::vector<Message> do_dead_letters(const std::string& queue, std::size_t max) override;

  void do_each_dead_letter(const std::string& queue,
                           const std::function<bool(const Message&)>& each) override;

  std::uint64_t do_purge_dead_letters(const std::string& queue) override {
    return purge_with(queue, &LmdbBroker::purge_dead);
  }

  std::vector<Message> do_redrive(const std::string& queue, const RedriveOptions& options) override;

  // The dead letters a redrive moves: the oldest, or those named by id.
  std::vector<std::pair<std::uint64_t, Header>> redrive_choice(QueueView& view,
                                                               const RedriveOptions& options);

  // A redriven message enters the target as a send would: the target's rules
  // apply. Throws before anything moved.
  static void check_redrivable(const QueueView& into,
                               const std::vector<std::pair<std::uint64_t, Header>>& chosen,
                               const std::vector<Message>& out);

  std::optional<Message> do_find_dead_letter(const std::string& queue,
                                             const std::string& id) override;

  std::vector<std::string> do_delete_dead_letters(const std::string& queue,
                                                  const std::vector<std::string>& ids) override;

  void do_export_messages(const std::string& queue,
                          const std::function<void(const Message&)>& each) override;

  std::vector<std::string> do_import_messages(const std::string& queue,
                                              std::vector<Message> messages, bool create_queue,
                                              bool skip_existing) override;

  std::optional<Message> do_show(const std::string& queue, const std::string& id) override;

  void do_register_worker(std::uint32_t pid, Millis since, const std::string& command) override;

  void do_unregister_worker(std::uint32_t pid, Millis since) override;

  void do_backup(const std::string& path) override { env_->copy_to(path); }

  std::vector<std::string> do_verify() override;

 private:
  const store::Databases& db() const { return env_->db(); }

  // LMDB never reuses in a transaction the pages the one before it freed (that
  // snapshot must survive a crash). A bulk send right after a drain would grow
  // the file by every page the drain's last ack freed; one small commit first
  // makes them reusable.
  void commit_small_change(const std::string& queue);

  std::optional<QueueRecord> load(Txn& txn, const std::string& queue);

  QueueRecord must_load(Txn& txn, const std::string& queue);

  // The queue in a write transaction; with `create`, a missing one is made
  // with the default settings (saved with the view).
  QueueView open(Txn& txn, const std::string& queue, bool create = false);

  // The record of a queue about to be made: a new id, made now.
  QueueRecord new_queue(Txn& txn, const std::string& queue);

  [[noreturn]] void damaged_queue(const std::string& queue) const;

  void remember_done(QueueView& view, const std::string& key, Millis keep);

  std::uint32_t next_qid(Txn& txn);

  std::uint64_t meta_u64(Txn& txn, const char* key);

  void set_meta_u64(Txn& txn, const char* key, std::uint64_t v);

  [[noreturn]] void damaged_meta(const std::string& what) const;

  static std::vector<std::string> keys_with_prefix(Txn& txn, MDB_dbi dbi,
                                                   const std::string& prefix);

  std::vector<std::pair<std::uint64_t, Header>> dead_headers(QueueView& view, std::size_t max);

  // Removes with `remove` (purge_live or purge_dead) in one write transaction.
  std::uint64_t purge_with(const std::string& queue,
                           std::uint64_t (LmdbBroker::*remove)(QueueView&));

  std::uint64_t purge_live(QueueView& view);

  std::uint64_t purge_dead(QueueView& view);

  // Counts of a queue as of `now`: the record's counts are as of its last write
  // transaction, so entries of `leases` and `delayed` that have come due since
  // are counted as visible. Every write moves them, so this stays short.
  QueueStats queue_stats(Txn& txn, const std::string& name, const QueueRecord& rec, Millis now);

  // With `acks`, acks those receipts first in the same transaction (results
  // into `acked`): ack_and_receive.
  std::vector<Message> receive_now(const std::string& queue, const ReceiveOptions& options,
                                   const std::vector<std::string>* acks = nullptr,
                                   std::vector<ReceiptResult>* acked = nullptr);

  std::unique_ptr<store::Env> env_;
  SystemClock system_clock_;
  const Clock* clock_;
  std::function<std::uint64_t()> random_;
  HolderProbe holder_alive_;
  std::mt19937_64 engine_;
};

}  // namespace q
