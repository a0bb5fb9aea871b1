// Operations on a whole queue or file: verify, backup, export/import, dead-letter
// tooling, redrive to another queue.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>

#include "libq/error.hpp"
#include "support.hpp"
#include "libq/lmdb/broker.hpp"

namespace fs = std::filesystem;
using namespace q;
using q::testing::error_of;

namespace {

class OperationsTest : public ::testing::Test {
 protected:
  void SetUp() override { broker_ = open((dir_ / "ops.q").string(), true); }
  void TearDown() override { broker_.reset(); }
  std::unique_ptr<Broker> open(const std::string& path, bool create = false) {
    LmdbOptions options;
    options.open.path = path;
    options.open.create = create;
    options.clock = &clock_;
    return open_lmdb_broker(options);
  }
  std::string send(const std::string& queue, const std::string& body,
                   const std::string& group = "") {
    std::vector<OutgoingMessage> batch{{body, {{"k", "v"}}, "", group}};
    return broker_->send(queue, std::move(batch), {}).at(0).id;
  }
  Message receive(const std::string& queue) {
    ReceiveOptions options;
    return broker_->receive(queue, options).at(0);
  }
  // A file with every kind of state in it.
  void populate() {
    ConfigChange fifo;
    fifo.fifo = true;
    broker_->create_queue("jobs", {});
    broker_->create_queue("orders", fifo);
    for (int i = 0; i < 5; ++i) send("jobs", "job" + std::to_string(i));
    broker_->dead_letter("jobs", receive("jobs").receipt, "broken");
    receive("jobs");  // in flight
    NackOptions later;
    later.delay = kHour;
    broker_->nack("jobs", receive("jobs").receipt, later);  // delayed
    for (int i = 0; i < 3; ++i)
      send("orders", "o" + std::to_string(i), "g" + std::to_string(i % 2));
    receive("orders");
  }

  q::testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.path();
  FakeClock clock_;
  std::unique_ptr<Broker> broker_;
};

TEST_F(OperationsTest, VerifyFindsNothingWrongInAHealthyFile) {
  populate();
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
  clock_.advance(kDay);  // leases ran out, nothing written since
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
}

TEST_F(OperationsTest, VerifyReportsAMissingIndexEntry) {
  populate();
  broker_.reset();
  auto path = (dir_ / "ops.q").string();
  // Remove one entry of the age index behind q's back.
  q::testing::poke(path, "age", [](MDB_txn* txn, MDB_dbi age) {
    MDB_cursor* c;
    ASSERT_EQ(mdb_cursor_open(txn, age, &c), 0);
    MDB_val k, v;
    ASSERT_EQ(mdb_cursor_get(c, &k, &v, MDB_FIRST), 0);
    ASSERT_EQ(mdb_cursor_del(c, 0), 0);
    mdb_cursor_close(c);
  });
  broker_ = open(path);
  auto problems = broker_->verify();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("missing from the age index"), std::string::npos) << problems[0];
}

TEST_F(OperationsTest, BackupIsACompleteUsableCopy) {
  populate();
  auto copy = (dir_ / "backup.q").string();
  broker_->backup(copy);
  broker_->backup(copy);  // replacing an older backup is fine
  EXPECT_EQ(error_of([&] { broker_->backup((dir_ / "ops.q").string()); }), ErrorKind::Usage);
  auto restored = open(copy);
  EXPECT_EQ(restored->verify(), std::vector<std::string>{});
  auto a = broker_->stats("");
  auto b = restored->stats("");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].visible, b[i].visible);
    EXPECT_EQ(a[i].in_flight, b[i].in_flight);
    EXPECT_EQ(a[i].dead, b[i].dead);
    EXPECT_EQ(a[i].counters.sent, b[i].counters.sent);
  }
}

TEST_F(OperationsTest, ExportImportRoundTripLosesNothing) {
  populate();
  std::vector<Message> exported;
  broker_->export_messages("jobs", [&](const Message& m) { exported.push_back(m); });
  ASSERT_EQ(exported.size(), 5u);
  auto other = open((dir_ / "other.q").string(), true);
  auto ids = other->import_messages("jobs", exported, /*create_queue=*/true);
  std::vector<Message> again;
  other->export_messages("jobs", [&](const Message& m) { again.push_back(m); });
  ASSERT_EQ(again.size(), exported.size());
  for (std::size_t i = 0; i < again.size(); ++i) {
    const auto& before = exported[i];
    const auto& after = again[i];
    EXPECT_EQ(after.id, before.id);
    EXPECT_EQ(ids[i], before.id);
    EXPECT_EQ(after.body, before.body);
    EXPECT_EQ(after.attributes, before.attributes);
    EXPECT_EQ(after.receive_count, before.receive_count);
    EXPECT_EQ(after.sent_at, before.sent_at);
    EXPECT_EQ(after.reason, before.reason);
    // A lease does not move between files: in flight arrives visible.
    auto expected = before.state == MessageState::InFlight ? MessageState::Visible : before.state;
    EXPECT_EQ(after.state, expected) << before.id;
  }
  EXPECT_EQ(other->verify(), std::vector<std::string>{});
  // Importing again into the same file keeps nothing twice: ids are taken, so new ones.
  auto second = other->import_messages("jobs", exported, false);
  EXPECT_NE(second[0], exported[0].id);
  EXPECT_EQ(other->verify(), std::vector<std::string>{});
}

// One counting rule for import on both backends (issue 27 item 6): every
// imported message counts as sent, a dead letter also as dead-lettered, as
// the NATS backend counts them, so the counters add up to what the queue has.
TEST_F(OperationsTest, ImportCountsSentAndDeadLetteredAsOnNats) {
  populate();
  std::vector<Message> exported;
  broker_->export_messages("jobs", [&](const Message& m) { exported.push_back(m); });
  auto dead = static_cast<std::uint64_t>(
      std::count_if(exported.begin(), exported.end(),
                    [](const Message& m) { return m.state == MessageState::Dead; }));
  ASSERT_EQ(dead, 1u);
  auto other = open((dir_ / "other.q").string(), true);
  other->import_messages("jobs", exported, /*create_queue=*/true);
  auto s = other->stats("jobs").at(0);
  EXPECT_EQ(s.counters.sent, exported.size());
  EXPECT_EQ(s.counters.dead_lettered, dead);
  EXPECT_EQ(s.counters.sent - s.counters.dead_lettered, s.visible + s.in_flight + s.delayed);
  EXPECT_EQ(s.counters.received, 0u);
  EXPECT_EQ(other->verify(), std::vector<std::string>{});
}

TEST_F(OperationsTest, ImportIntoFifoNeedsGroups) {
  populate();
  std::vector<Message> jobs;
  broker_->export_messages("jobs", [&](const Message& m) { jobs.push_back(m); });
  EXPECT_EQ(error_of([&] { broker_->import_messages("orders", jobs, false); }),
            ErrorKind::InvalidData);
  std::vector<Message> orders;
  broker_->export_messages("orders", [&](const Message& m) { orders.push_back(m); });
  ConfigChange fifo;
  fifo.fifo = true;
  broker_->create_queue("orders2", fifo);
  broker_->import_messages("orders2", orders, false);
  EXPECT_EQ(broker_->stats("orders2").at(0).groups, 2u);
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
}

TEST_F(OperationsTest, DeadLetterShowDeleteAndRedriveElsewhere) {
  populate();
  auto dead = broker_->dead_letters("jobs", 10);
  ASSERT_EQ(dead.size(), 1u);
  auto found = broker_->find_dead_letter("jobs", dead[0].id);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->reason, "broken");
  EXPECT_FALSE(broker_->find_dead_letter("jobs", "m999"));
  EXPECT_EQ(error_of([&] { broker_->find_dead_letter("jobs", "nope"); }), ErrorKind::InvalidData);

  broker_->create_queue("retry", {});
  RedriveOptions to;
  to.to = "retry";
  auto moved = broker_->redrive("jobs", to);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(broker_->stats("retry").at(0).visible, 1u);
  EXPECT_EQ(broker_->stats("jobs").at(0).dead, 0u);
  EXPECT_EQ(receive("retry").id, dead[0].id);
}

TEST_F(OperationsTest, RedriveIntoFifoNeedsAGroup) {
  populate();
  RedriveOptions to_fifo;
  to_fifo.to = "orders";
  EXPECT_EQ(error_of([&] { broker_->redrive("jobs", to_fifo); }), ErrorKind::InvalidData);
  EXPECT_EQ(broker_->stats("jobs").at(0).dead, 1u);
  to_fifo.to = "missing";
  EXPECT_EQ(error_of([&] { broker_->redrive("jobs", to_fifo); }), ErrorKind::NotFound);
}

TEST_F(OperationsTest, DeleteChosenDeadLetters) {
  populate();
  auto id = broker_->dead_letters("jobs", 10).at(0).id;
  auto missing = broker_->delete_dead_letters("jobs", {id, "m777"});
  EXPECT_EQ(missing, std::vector<std::string>{"m777"});
  EXPECT_EQ(broker_->stats("jobs").at(0).dead, 0u);
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
}

}  // namespace

namespace {

// q work --to: the ack of the source and the send to the next queue commit
// together, or neither does.
TEST(AckAndSend, AcksAndSendsInOneTransactionOrNeither) {
  q::testing::TempDir tmp;
  FakeClock clock;
  LmdbOptions options;
  options.open.path = tmp.file("stage.q");
  options.open.create = true;
  options.clock = &clock;
  auto broker = open_lmdb_broker(options);
  broker->create_queue("src", {});
  ConfigChange small;
  small.max_depth = 2;
  broker->create_queue("dst", small);
  auto take = [&](const std::string& body) {
    broker->send("src", {{body, {}, ""}}, {});
    return broker->receive("src", {}).at(0);
  };
  auto visible = [&](const std::string& queue) { return broker->stats(queue).at(0).visible; };

  auto m = take("x");
  auto done =
      broker->ack_and_send("src", m.receipt, "dst", {{"X1", {{"k", "v"}}, ""}, {"X2", {}, ""}}, {});
  EXPECT_EQ(done.outcome, ReceiptOutcome::Done);
  ASSERT_EQ(done.sent.size(), 2u);
  EXPECT_EQ(visible("dst"), 2u);
  EXPECT_EQ(broker->stats("src").at(0).counters.acked, 1u);
  EXPECT_EQ(broker->stats("src").at(0).in_flight, 0u);
  EXPECT_EQ(broker->peek("dst", 1).at(0).attributes, (Attributes{{"k", "v"}}));

  // A stale receipt sends nothing.
  auto late = take("y");
  clock.advance(31 * kSecond);
  auto again = broker->receive("src", {}).at(0);
  auto stale = broker->ack_and_send("src", late.receipt, "dst", {{"Y", {}, ""}}, {});
  EXPECT_EQ(stale.outcome, ReceiptOutcome::Stale);
  EXPECT_TRUE(stale.sent.empty());
  EXPECT_EQ(visible("dst"), 2u);
  EXPECT_EQ(broker->stats("src").at(0).counters.acked, 1u);

  // DST refuses (full): nothing sent and the source is not acked.
  EXPECT_EQ(error_of([&] {
              broker->ack_and_send("src", again.receipt, "dst", {{"Z", {}, ""}}, {});
            }),
            ErrorKind::Full);
  EXPECT_EQ(visible("dst"), 2u);
  EXPECT_EQ(broker->stats("src").at(0).in_flight, 1u);
  EXPECT_EQ(error_of([&] {
              broker->ack_and_send("src", again.receipt, "nosuch", {{"Z", {}, ""}}, {});
            }),
            ErrorKind::NotFound);
  EXPECT_EQ(error_of([&] {
              broker->ack_and_send("src", again.receipt, "src", {{"Z", {}, ""}}, {});
            }),
            ErrorKind::Usage);
  EXPECT_EQ(broker->stats("src").at(0).in_flight, 1u);
  // Nothing to send: a plain ack.
  EXPECT_EQ(broker->ack_and_send("src", again.receipt, "dst", {}, {}).outcome,
            ReceiptOutcome::Done);
  EXPECT_EQ(broker->stats("src").at(0).in_flight, 0u);
  EXPECT_EQ(broker->verify(), std::vector<std::string>{});
}

}  // namespace
