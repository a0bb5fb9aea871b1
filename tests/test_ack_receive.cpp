// Broker::ack_and_receive (issue 14 item 4): one round of a consumer, the
// acks of what finished and the next messages, in one write transaction.
#include <gtest/gtest.h>

#include <lmdb.h>

#include "libq/lmdb/broker.hpp"
#include "support.hpp"

using namespace q;
using q::testing::error_of;

namespace {

class AckReceiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("rounds.q");
    broker_ = open(true);
    broker_->create_queue("jobs", {});
    ConfigChange fifo;
    fifo.fifo = true;
    broker_->create_queue("orders", fifo);
  }
  void TearDown() override {
    if (broker_) {
      EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
    }
  }

  std::unique_ptr<Broker> open(bool create = false) {
    LmdbOptions options;
    options.open.path = path_;
    options.open.create = create;
    options.clock = &clock_;
    options.random = [this] { return ++nonce_; };
    return open_lmdb_broker(options);
  }

  void send(const std::vector<std::string>& bodies, const std::string& queue = "jobs",
            const std::string& group = "") {
    std::vector<OutgoingMessage> batch;
    for (const auto& body : bodies) batch.push_back({body, {}, "", group});
    broker_->send(queue, std::move(batch), {});
  }

  static ReceiveOptions take(std::uint32_t n, bool one_per_group = false) {
    ReceiveOptions options;
    options.max_messages = n;
    options.one_per_group = one_per_group;
    return options;
  }

  static std::vector<std::string> receipts(const std::vector<Message>& messages) {
    std::vector<std::string> out;
    for (const auto& m : messages) out.push_back(m.receipt);
    return out;
  }

  static std::vector<std::string> bodies(const std::vector<Message>& messages) {
    std::vector<std::string> out;
    for (const auto& m : messages) out.push_back(m.body);
    return out;
  }

  // The id of the file's last committed transaction (the broker closed).
  std::size_t last_txn() {
    broker_.reset();
    MDB_env* env;
    EXPECT_EQ(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 32);
    EXPECT_EQ(mdb_env_open(env, path_.c_str(), MDB_NOSUBDIR | MDB_RDONLY, 0644), 0);
    MDB_envinfo info;
    mdb_env_info(env, &info);
    mdb_env_close(env);
    broker_ = open();
    return info.me_last_txnid;
  }

  q::testing::TempDir dir_;
  std::string path_;
  FakeClock clock_;
  std::uint64_t nonce_ = 0;
  std::unique_ptr<Broker> broker_;
};

TEST_F(AckReceiveTest, AcksTheFinishedAndTakesTheNextInOneCommit) {
  send({"a", "b", "c", "d", "e"});
  auto first = broker_->receive("jobs", take(2));
  ASSERT_EQ(bodies(first), (std::vector<std::string>{"a", "b"}));

  // Opening and closing alone may commit (format checks): counted apart.
  auto before_idle = last_txn();
  auto idle = last_txn() - before_idle;
  auto before = last_txn();
  auto round = broker_->ack_and_receive("jobs", receipts(first), take(2));
  auto commits = last_txn() - before - idle;
  EXPECT_EQ(commits, 1u);

  ASSERT_EQ(round.acked.size(), 2u);
  for (const auto& r : round.acked) EXPECT_EQ(r.outcome, ReceiptOutcome::Done);
  EXPECT_EQ(bodies(round.received), (std::vector<std::string>{"c", "d"}));
  auto s = broker_->stats("jobs").at(0);
  EXPECT_EQ(s.counters.acked, 2u);
  EXPECT_EQ(s.counters.received, 4u);
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.visible, 1u);
  for (const auto& m : round.received) EXPECT_FALSE(m.receipt.empty());
}

TEST_F(AckReceiveTest, StaleAndRepeatedReceiptsAreOutcomesAndTheReceiveGoesOn) {
  send({"a", "b"});
  auto first = broker_->receive("jobs", take(1));
  ASSERT_EQ(first.size(), 1u);
  auto r = first[0].receipt;
  broker_->ack("jobs", {r});  // acked already: stale now
  auto second = broker_->receive("jobs", take(1));
  auto round =
      broker_->ack_and_receive("jobs", {r, second.at(0).receipt, second.at(0).receipt}, take(5));
  ASSERT_EQ(round.acked.size(), 3u);
  EXPECT_EQ(round.acked[0].outcome, ReceiptOutcome::Stale);
  EXPECT_EQ(round.acked[1].outcome, ReceiptOutcome::Done);
  EXPECT_EQ(round.acked[2].outcome, ReceiptOutcome::Done);  // the same receipt, reported alike
  EXPECT_TRUE(round.received.empty());
  EXPECT_EQ(broker_->stats("jobs").at(0).counters.acked, 2u);
}

TEST_F(AckReceiveTest, AnAckThatFreesAGroupLetsTheSameRoundTakeItsNext) {
  send({"a1", "a2"}, "orders", "A");
  auto first = broker_->receive("orders", take(1, true));
  ASSERT_EQ(bodies(first), (std::vector<std::string>{"a1"}));
  // Held by a1: nothing of A without the ack.
  EXPECT_TRUE(broker_->receive("orders", take(1, true)).empty());
  auto round = broker_->ack_and_receive("orders", receipts(first), take(1, true));
  EXPECT_EQ(bodies(round.received), (std::vector<std::string>{"a2"}));
}

TEST_F(AckReceiveTest, NoMessagesWantedOnlyAcksAndAPausedQueueOnlyAcks) {
  send({"a", "b", "c"});
  auto first = broker_->receive("jobs", take(2));
  auto round = broker_->ack_and_receive("jobs", {first.at(0).receipt}, take(0));
  EXPECT_EQ(round.acked.at(0).outcome, ReceiptOutcome::Done);
  EXPECT_TRUE(round.received.empty());

  broker_->pause("jobs", 0, "maintenance");
  round = broker_->ack_and_receive("jobs", {first.at(1).receipt}, take(5));
  EXPECT_EQ(round.acked.at(0).outcome, ReceiptOutcome::Done);
  EXPECT_TRUE(round.received.empty());
  EXPECT_EQ(broker_->stats("jobs").at(0).counters.acked, 2u);
}

TEST_F(AckReceiveTest, RulesComeFirst) {
  send({"a"});
  auto waiting = take(1);
  waiting.wait = 1 * kSecond;
  EXPECT_EQ(error_of([&] { broker_->ack_and_receive("jobs", {}, waiting); }), ErrorKind::Usage);
  auto too_long = take(1);
  too_long.visibility_timeout = 13 * kHour;
  EXPECT_EQ(error_of([&] { broker_->ack_and_receive("jobs", {}, too_long); }), ErrorKind::Usage);
  EXPECT_EQ(error_of([&] { broker_->ack_and_receive("no such", {}, take(1)); }), ErrorKind::Usage);
  EXPECT_EQ(error_of([&] { broker_->ack_and_receive("missing", {}, take(1)); }),
            ErrorKind::NotFound);
  // Nothing was taken by the refused calls.
  EXPECT_EQ(broker_->stats("jobs").at(0).counters.received, 0u);
}

}  // namespace
