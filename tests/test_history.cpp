// The attempt history of a message (q show) and the paused state of a queue,
// with a fake clock.
#include <gtest/gtest.h>
#include <unistd.h>

#include "libq/error.hpp"
#include "libq/lmdb/broker.hpp"
#include "libq/lmdb/records.hpp"
#include "support.hpp"

using namespace q;

namespace {

class HistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_.file("test.q");
    broker_ = open(true);
    ConfigChange change;
    change.max_receives = 0;
    broker_->create_queue("jobs", change);
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
    options.random = [this] { return ++random_value_; };
    return open_lmdb_broker(options);
  }
  std::string send(const std::string& body) {
    return broker_->send("jobs", {{body, {}, {}}}, {}).at(0).id;
  }
  Message receive(std::uint32_t pid = 0, Millis worker_since = 0) {
    ReceiveOptions options;
    options.holder_pid = pid;
    options.worker_since = worker_since;
    auto got = broker_->receive("jobs", options);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? Message{} : got.front();
  }
  std::vector<Attempt> history(const std::string& id) {
    auto m = broker_->show("jobs", id);
    EXPECT_TRUE(m.has_value());
    return m ? m->attempts : std::vector<Attempt>{};
  }

  q::testing::TempDir tmp_;
  std::string path_;
  FakeClock clock_;
  std::uint64_t random_value_ = 0x0123456789abcdefULL;
  std::unique_ptr<Broker> broker_;
};

TEST_F(HistoryTest, AMessageNeverReceivedHasNone) {
  auto id = send("a");
  EXPECT_TRUE(history(id).empty());
  EXPECT_FALSE(broker_->show("jobs", "m99").has_value());
  EXPECT_EQ(q::testing::error_of([&] { broker_->show("jobs", "x1"); }), ErrorKind::InvalidData);
}

TEST_F(HistoryTest, ReleasedTimedOutAndOpenAttemptsInOrder) {
  auto id = send("a");
  const Millis t0 = clock_.now();
  auto m = receive(4242);
  clock_.advance(100);
  NackOptions nack;
  nack.reason = "exit status 3: boom";
  nack.run.exit_status = 3;
  nack.run.first_line = "boom at 0x7f3a";
  nack.run.stderr_tail = "boom at 0x7f3a\nline 2";
  broker_->nack("jobs", m.receipt, nack);

  clock_.advance(10);
  m = receive(4343);  // its lease runs out: the next receive records that
  clock_.advance(40 * kSecond);
  m = receive(4444, 1'699'000'000'000);

  auto h = history(id);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].receive, 1u);
  EXPECT_EQ(h[0].pid, 4242u);
  EXPECT_EQ(h[0].received_at, t0);
  EXPECT_EQ(h[0].end, AttemptEnd::Released);
  EXPECT_EQ(h[0].ended_at, t0 + 100);
  EXPECT_EQ(h[0].reason, "exit status 3: boom");
  EXPECT_EQ(h[0].run.exit_status, 3);
  EXPECT_EQ(h[0].run.first_line, "boom at 0x7f3a");
  EXPECT_EQ(h[0].run.stderr_tail, "boom at 0x7f3a\nline 2");
  EXPECT_EQ(h[1].receive, 2u);
  EXPECT_EQ(h[1].pid, 4343u);
  EXPECT_EQ(h[1].end, AttemptEnd::TimedOut);
  EXPECT_EQ(h[1].ended_at, t0 + 110 + 30 * kSecond);  // the lease's end, not when noticed
  EXPECT_EQ(h[2].receive, 3u);
  EXPECT_EQ(h[2].pid, 4444u);
  EXPECT_EQ(h[2].end, AttemptEnd::Open);

  // A q work lease that runs out lost its heartbeat; shown so before any receive.
  clock_.advance(31 * kSecond);
  h = history(id);
  EXPECT_EQ(h.back().end, AttemptEnd::HeartbeatLost);
}

TEST_F(HistoryTest, TheCommandLineComesFromTheRegistryAndStaysWithTheAttempt) {
  auto id = send("a");
  const std::uint32_t pid = static_cast<std::uint32_t>(::getpid());
  broker_->register_worker(pid, 777, "./handler --fast");
  auto m = receive(pid, 777);
  EXPECT_EQ(history(id).at(0).command, "./handler --fast");
  NackOptions nack;
  nack.reason = "exit status 1";
  broker_->nack("jobs", m.receipt, nack);
  broker_->unregister_worker(pid, 777);
  auto h = history(id);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].command, "./handler --fast");  // copied when the attempt ended
}

TEST_F(HistoryTest, KeepsTheLastEightAndFollowsTheMessageThroughDeadLettering) {
  auto id = send("a");
  for (int i = 1; i <= 11; ++i) {
    auto m = receive(100 + static_cast<std::uint32_t>(i));
    NackOptions nack;
    nack.reason = "try " + std::to_string(i);
    broker_->nack("jobs", m.receipt, nack);
  }
  auto m = receive(200);
  RunReport run;
  run.exit_status = 65;
  run.first_line = "bad input";
  broker_->dead_letter("jobs", m.receipt, "exit status 65: bad input", run);
  auto h = history(id);
  ASSERT_EQ(h.size(), kMaxAttempts);
  EXPECT_EQ(h.front().receive, 5u);
  EXPECT_EQ(h.front().reason, "try 5");
  EXPECT_EQ(h.back().end, AttemptEnd::DeadLettered);
  EXPECT_EQ(h.back().run.exit_status, 65);
  auto dead = broker_->find_dead_letter("jobs", id);
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->attempts.size(), kMaxAttempts);
  EXPECT_EQ(broker_->show("jobs", id)->state, MessageState::Dead);

  // Redriven, it keeps its history; deleted, the history goes with it.
  broker_->redrive("jobs", {});
  EXPECT_EQ(history(id).size(), kMaxAttempts);
  m = receive(300);
  EXPECT_EQ(history(id).back().pid, 300u);
  broker_->ack("jobs", {m.receipt});
  EXPECT_FALSE(broker_->show("jobs", id).has_value());
  auto again = send("b");
  EXPECT_TRUE(history(again).empty());
}

TEST_F(HistoryTest, AMessageAckedAtItsFirstDeliveryWritesNoHistory) {
  auto id = send("a");
  auto m = receive();
  EXPECT_EQ(history(id).at(0).pid, static_cast<std::uint32_t>(::getpid()));
  broker_->ack("jobs", {m.receipt});
  broker_.reset();
  std::size_t entries = 99;
  q::testing::poke(path_, "attempts", [&](MDB_txn* txn, MDB_dbi dbi) {
    MDB_stat st;
    mdb_stat(txn, dbi, &st);
    entries = st.ms_entries;
  });
  EXPECT_EQ(entries, 0u);
  broker_ = open();
}

// ---- pause and resume ------------------------------------------------------------

TEST_F(HistoryTest, APausedQueueDeliversNothingButAcceptsSends) {
  send("a");
  broker_->pause("jobs", 0, "relay down");
  send("b");
  EXPECT_TRUE(broker_->receive("jobs", {}).empty());
  EXPECT_EQ(broker_->next_delivery("jobs", false), INT64_MAX);
  auto s = broker_->stats("jobs").at(0);
  ASSERT_TRUE(s.pause);
  EXPECT_EQ(s.pause->reason, "relay down");
  EXPECT_EQ(s.pause->since, clock_.now());
  EXPECT_EQ(s.pause->until, 0);
  EXPECT_EQ(s.visible, 2u);
  auto was = broker_->resume("jobs");
  ASSERT_TRUE(was);
  EXPECT_EQ(was->reason, "relay down");
  EXPECT_FALSE(broker_->resume("jobs"));
  EXPECT_FALSE(broker_->stats("jobs").at(0).pause);
  EXPECT_EQ(broker_->receive("jobs", {}).size(), 1u);
}

TEST_F(HistoryTest, APauseWithAnEndEndsByItself) {
  send("a");
  const Millis until = clock_.now() + 5 * kMinute;
  broker_->pause("jobs", until, "");
  EXPECT_EQ(broker_->next_delivery("jobs", false), until);  // a waiting receiver wakes then
  clock_.advance(5 * kMinute - 1);
  EXPECT_TRUE(broker_->receive("jobs", {}).empty());
  clock_.advance(1);
  EXPECT_FALSE(broker_->stats("jobs").at(0).pause);
  EXPECT_EQ(broker_->receive("jobs", {}).size(), 1u);
  EXPECT_EQ(q::testing::error_of([&] { broker_->pause("jobs", clock_.now(), ""); }),
            ErrorKind::Usage);
  EXPECT_EQ(q::testing::error_of([&] { broker_->pause("nosuch", 0, ""); }), ErrorKind::NotFound);
}

TEST_F(HistoryTest, InFlightDeliveriesGoOnWhilePaused) {
  send("a");
  auto m = receive();
  broker_->pause("jobs", 0, "");
  EXPECT_EQ(broker_->extend("jobs", m.receipt, kMinute), clock_.now() + kMinute);
  EXPECT_EQ(broker_->ack("jobs", {m.receipt}).at(0).outcome, ReceiptOutcome::Done);
  broker_->delete_queue("jobs");  // the pause goes with the queue
  broker_->create_queue("jobs", {});
  EXPECT_FALSE(broker_->stats("jobs").at(0).pause);
}

TEST(HistoryRecords, RoundTripAndRefuseDamage) {
  std::vector<Attempt> attempts(2);
  attempts[0].receive = 1;
  attempts[0].pid = 9;
  attempts[0].end = AttemptEnd::Released;
  attempts[0].run.exit_status = 1;
  attempts[0].run.stderr_tail = "x";
  attempts[1].receive = 2;
  attempts[1].command = "cmd";
  auto bytes = store::encode(attempts);
  auto back = store::decode_attempts(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].run.exit_status, 1);
  EXPECT_EQ((*back)[1].command, "cmd");
  EXPECT_FALSE((*back)[1].run.exit_status);
  bytes[bytes.size() - 1] ^= 1;
  EXPECT_FALSE(store::decode_attempts(bytes));

  store::Header plain;
  plain.reason = "r";
  auto v1 = store::encode(plain);
  EXPECT_EQ(v1[4], 1);  // without a holder, the header stays version 1
  store::Header held = plain;
  held.holder_pid = 5;
  held.holder_since = 6;
  held.has_history = true;
  auto decoded = store::decode_header(store::encode(held));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->holder_pid, 5u);
  EXPECT_EQ(decoded->holder_since, 6);
  EXPECT_TRUE(decoded->has_history);
  EXPECT_FALSE(store::decode_header(v1)->has_history);
}

}  // namespace
