// Queue semantics of the LMDB backend, with a fake clock: nothing here sleeps
// for a timeout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "libq/error.hpp"
#include "support.hpp"
#include "libq/lmdb/broker.hpp"
#include "libq/lmdb/records.hpp"

namespace fs = std::filesystem;
using namespace q;
using q::testing::error_of;
using q::testing::poke;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class QueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_ / "test.q").string();
    broker_ = open(true);
  }
  void TearDown() override {
    // Whatever a test did, the file must still be consistent.
    if (broker_ && verify_at_end_) {
      EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
    }
    broker_.reset();
  }

  std::unique_ptr<Broker> open(bool create = false, Millis lock_timeout = 10 * kSecond) {
    LmdbOptions options;
    options.open.path = path_;
    options.open.create = create;
    options.open.lock_timeout = lock_timeout;
    options.clock = &clock_;
    options.random = [this] { return random_value_; };
    return open_lmdb_broker(options);
  }

  void create(const std::string& queue, ConfigChange change = {}) {
    broker_->create_queue(queue, change);
  }

  std::string send(const std::string& queue, const std::string& body, SendOptions options = {},
                   const std::string& dedup = "") {
    std::vector<OutgoingMessage> batch{{body, {}, dedup}};
    return broker_->send(queue, std::move(batch), options).at(0).id;
  }

  std::vector<Message> receive(const std::string& queue, std::uint32_t n = 1,
                               std::optional<Millis> visibility = std::nullopt) {
    ReceiveOptions options;
    options.max_messages = n;
    options.visibility_timeout = visibility;
    return broker_->receive(queue, options);
  }

  Message receive_one(const std::string& queue) {
    auto got = receive(queue);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? Message{} : got.front();
  }

  QueueStats stats(const std::string& queue) { return broker_->stats(queue).at(0); }

  ReceiptOutcome ack(const std::string& queue, const std::string& receipt) {
    return broker_->ack(queue, {receipt}).at(0).outcome;
  }

  q::testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.path();
  std::string path_;
  FakeClock clock_;
  std::uint64_t random_value_ = 0x0123456789abcdefULL;
  std::unique_ptr<Broker> broker_;
  bool verify_at_end_ = true;
};

// ---- queues -------------------------------------------------------------------

TEST_F(QueueTest, CreateListAndDelete) {
  create("emails");
  create("orders.v2");
  EXPECT_EQ(broker_->list_queues(), (std::vector<std::string>{"emails", "orders.v2"}));
  send("emails", "x");
  auto removed = broker_->delete_queue("emails");
  EXPECT_EQ(removed.messages, 1u);
  EXPECT_EQ(broker_->list_queues(), (std::vector<std::string>{"orders.v2"}));
  EXPECT_EQ(error_of([&] { send("emails", "x"); }), ErrorKind::NotFound);
}

TEST_F(QueueTest, CreateIsIdempotentButRefusesConflictingSettings) {
  ConfigChange change;
  change.max_receives = 3;
  EXPECT_TRUE(broker_->create_queue("emails", change));
  EXPECT_FALSE(broker_->create_queue("emails", change));
  EXPECT_FALSE(broker_->create_queue("emails", {}));
  change.max_receives = 4;
  EXPECT_EQ(error_of([&] { broker_->create_queue("emails", change); }), ErrorKind::Usage);
}

TEST_F(QueueTest, QueueNamesAreChecked) {
  for (std::string bad :
       std::vector<std::string>{"", "has space", "slash/y", "ünï", std::string(81, 'a')})
    EXPECT_EQ(error_of([&] { broker_->create_queue(bad, {}); }), ErrorKind::Usage) << bad;
  EXPECT_TRUE(broker_->create_queue(std::string(80, 'a'), {}));
  EXPECT_TRUE(broker_->create_queue("A-z_0.9", {}));
}

TEST_F(QueueTest, SettingsAreValidatedAndChangeable) {
  ConfigChange bad;
  bad.visibility_timeout = 13 * kHour;
  EXPECT_EQ(error_of([&] { broker_->create_queue("q", bad); }), ErrorKind::Usage);
  bad = {};
  bad.max_receives = 1001;
  EXPECT_EQ(error_of([&] { broker_->create_queue("q", bad); }), ErrorKind::Usage);
  create("q");
  auto config = broker_->configure("q", {});
  EXPECT_EQ(config.visibility_timeout, 30 * kSecond);
  EXPECT_EQ(config.max_receives, 5u);
  EXPECT_EQ(config.retention, 4 * kDay);
  EXPECT_EQ(config.max_size, 1024u * 1024);
  EXPECT_EQ(config.dedup_window, 5 * kMinute);
  ConfigChange change;
  change.visibility_timeout = 2 * kMinute;
  EXPECT_EQ(broker_->configure("q", change).visibility_timeout, 2 * kMinute);
  EXPECT_EQ(broker_->configure("q", {}).visibility_timeout, 2 * kMinute);
}

TEST_F(QueueTest, SendToMissingQueueFailsUnlessCreateAsked) {
  EXPECT_EQ(error_of([&] { send("typo", "x"); }), ErrorKind::NotFound);
  EXPECT_TRUE(broker_->list_queues().empty());
  SendOptions options;
  options.create_queue = true;
  send("typo", "x", options);
  EXPECT_EQ(broker_->list_queues(), std::vector<std::string>{"typo"});
}

// ---- send and receive ---------------------------------------------------------------

TEST_F(QueueTest, DeliversInSendOrderWithBodyAndAttributes) {
  create("q");
  std::vector<OutgoingMessage> batch;
  batch.push_back({"one", {{"kind", "welcome"}}, ""});
  batch.push_back({std::string("two\0bytes\n", 10), {}, ""});
  auto ids = broker_->send("q", std::move(batch), {});
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0].id, ids[1].id);
  auto got = receive("q", 10);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, ids[0].id);
  EXPECT_EQ(got[0].body, "one");
  EXPECT_EQ(got[0].attributes, (Attributes{{"kind", "welcome"}}));
  EXPECT_EQ(got[0].receive_count, 1u);
  EXPECT_EQ(got[0].sent_at, clock_.now());
  EXPECT_EQ(got[1].body, std::string("two\0bytes\n", 10));
  EXPECT_TRUE(receive("q").empty());
}

TEST_F(QueueTest, IdsAndReceiptsAreShellSafe) {
  create("q");
  for (int i = 0; i < 40; ++i) send("q", "x");
  for (const auto& m : receive("q", 40)) {
    for (const auto* s : {&m.id, &m.receipt}) {
      ASSERT_FALSE(s->empty());
      EXPECT_NE((*s)[0], '-');
      for (char c : *s) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '.') << *s;
    }
  }
}

TEST_F(QueueTest, OrdersByVisibleTimeThenSendOrder) {
  create("q");
  SendOptions later;
  later.delay = 10 * kSecond;
  auto delayed = send("q", "delayed", later);
  auto first = send("q", "first");
  auto second = send("q", "second");
  EXPECT_EQ(receive_one("q").id, first);
  EXPECT_EQ(receive_one("q").id, second);
  EXPECT_TRUE(receive("q").empty());
  clock_.advance(10 * kSecond);
  EXPECT_EQ(receive_one("q").id, delayed);
}

TEST_F(QueueTest, AtSchedulesAbsoluteTime) {
  create("q");
  SendOptions at;
  at.at = clock_.now() + kHour;
  send("q", "later", at);
  EXPECT_EQ(stats("q").delayed, 1u);
  clock_.advance(kHour - 1);
  EXPECT_TRUE(receive("q").empty());
  clock_.advance(1);
  EXPECT_EQ(receive_one("q").body, "later");
}

TEST_F(QueueTest, QueueDelayAppliesToEveryMessage) {
  ConfigChange change;
  change.delay = 5 * kSecond;
  create("q", change);
  send("q", "x");
  EXPECT_TRUE(receive("q").empty());
  clock_.advance(5 * kSecond);
  EXPECT_EQ(receive("q").size(), 1u);
}

TEST_F(QueueTest, OversizeMessageRefusesWholeBatch) {
  ConfigChange change;
  change.max_size = 4;
  create("q", change);
  std::vector<OutgoingMessage> batch{{"ok", {}, ""}, {"too long", {}, ""}};
  EXPECT_EQ(error_of([&] { broker_->send("q", batch, {}); }), ErrorKind::InvalidData);
  EXPECT_EQ(stats("q").visible, 0u);
  EXPECT_EQ(stats("q").counters.sent, 0u);
}

TEST_F(QueueTest, FullQueueRefusesWholeBatch) {
  ConfigChange change;
  change.max_depth = 2;
  create("q", change);
  send("q", "a");
  std::vector<OutgoingMessage> batch{{"b", {}, ""}, {"c", {}, ""}};
  EXPECT_EQ(error_of([&] { broker_->send("q", batch, {}); }), ErrorKind::Full);
  EXPECT_EQ(stats("q").visible, 1u);
  send("q", "b");
  EXPECT_EQ(error_of([&] { send("q", "c"); }), ErrorKind::Full);
  // In-flight messages count toward depth; acking makes room.
  auto m = receive_one("q");
  EXPECT_EQ(error_of([&] { send("q", "c"); }), ErrorKind::Full);
  ack("q", m.receipt);
  send("q", "c");
}

TEST_F(QueueTest, AttributesAreChecked) {
  create("q");
  std::vector<OutgoingMessage> batch{{"x", {{"", "v"}}, ""}};
  EXPECT_EQ(error_of([&] { broker_->send("q", batch, {}); }), ErrorKind::InvalidData);
  std::vector<OutgoingMessage> long_dedup{{"x", {}, std::string(129, 'd')}};
  EXPECT_EQ(error_of([&] { broker_->send("q", long_dedup, {}); }), ErrorKind::InvalidData);
}

// ---- visibility, receipts --------------------------------------------------------------

TEST_F(QueueTest, UnackedMessageComesBackAfterVisibilityTimeout) {
  ConfigChange change;
  change.visibility_timeout = 30 * kSecond;
  create("q", change);
  auto id = send("q", "x");
  auto first = receive_one("q");
  clock_.advance(30 * kSecond - 1);
  EXPECT_TRUE(receive("q").empty());
  EXPECT_EQ(stats("q").in_flight, 1u);
  clock_.advance(1);
  EXPECT_EQ(stats("q").visible, 1u);  // counted visible before any write moved it
  random_value_ = 42;
  auto second = receive_one("q");
  EXPECT_EQ(second.id, id);
  EXPECT_EQ(second.receive_count, 2u);
  EXPECT_NE(second.receipt, first.receipt);
  // The old receipt is stale and must not touch the new delivery.
  EXPECT_EQ(ack("q", first.receipt), ReceiptOutcome::Stale);
  EXPECT_EQ(stats("q").in_flight, 1u);
  EXPECT_EQ(ack("q", second.receipt), ReceiptOutcome::Done);
  EXPECT_EQ(stats("q").in_flight, 0u);
}

TEST_F(QueueTest, PerReceiveVisibilityTimeoutOverridesQueue) {
  create("q");
  send("q", "x");
  receive("q", 1, 2 * kSecond);
  clock_.advance(2 * kSecond);
  EXPECT_EQ(receive("q").size(), 1u);
  ReceiveOptions options;
  options.visibility_timeout = 13 * kHour;
  EXPECT_EQ(error_of([&] { broker_->receive("q", options); }), ErrorKind::Usage);
}

TEST_F(QueueTest, AckAfterExpiryButBeforeRedeliveryStillWorks) {
  create("q");
  send("q", "x");
  auto m = receive_one("q");
  clock_.advance(kHour);
  EXPECT_EQ(ack("q", m.receipt), ReceiptOutcome::Done);
  EXPECT_TRUE(receive("q").empty());
  auto s = stats("q");
  EXPECT_EQ(s.visible + s.in_flight + s.delayed, 0u);
}

TEST_F(QueueTest, AckHandlesEachReceiptOnItsOwn) {
  create("q");
  send("q", "a");
  send("q", "b");
  auto got = receive("q", 2);
  auto results = broker_->ack("q", {got[0].receipt, "garbage", got[0].receipt, got[1].receipt});
  EXPECT_EQ(results[0].outcome, ReceiptOutcome::Done);
  EXPECT_EQ(results[1].outcome, ReceiptOutcome::Malformed);
  // A receipt given twice is one ack, reported the same both times (issue 12, break 1).
  EXPECT_EQ(results[2].outcome, ReceiptOutcome::Done);
  EXPECT_EQ(results[3].outcome, ReceiptOutcome::Done);
  EXPECT_EQ(stats("q").counters.acked, 2u);
}

TEST_F(QueueTest, MalformedReceiptsAreInvalidData) {
  create("q");
  for (std::string bad : {"", "m1", "m1.", "m1.xyz", "-m1.0123456789abcdef", "m01.0123456789abcdef",
                          "m1.0000000000000000", "m1.0123456789ABCDEF"}) {
    EXPECT_EQ(error_of([&] { broker_->extend("q", bad, kSecond); }), ErrorKind::InvalidData) << bad;
  }
}

TEST_F(QueueTest, ExtendKeepsReceiptAndHidesLonger) {
  create("q");
  send("q", "x");
  auto m = receive_one("q");
  clock_.advance(20 * kSecond);
  EXPECT_EQ(broker_->extend("q", m.receipt, 2 * kMinute), clock_.now() + 2 * kMinute);
  clock_.advance(2 * kMinute - 1);
  EXPECT_TRUE(receive("q").empty());
  EXPECT_EQ(broker_->extend("q", m.receipt, kMinute), clock_.now() + kMinute);
  EXPECT_EQ(ack("q", m.receipt), ReceiptOutcome::Done);
}

TEST_F(QueueTest, ExtendIsBoundedToTwelveHoursAfterReceive) {
  create("q");
  send("q", "x");
  auto m = receive_one("q");
  clock_.advance(kHour);
  EXPECT_EQ(error_of([&] { broker_->extend("q", m.receipt, 12 * kHour); }), ErrorKind::InvalidData);
  broker_->extend("q", m.receipt, 11 * kHour);
  EXPECT_EQ(error_of([&] { broker_->extend("q", m.receipt, 13 * kHour); }), ErrorKind::Usage);
}

TEST_F(QueueTest, ExtendAfterRedeliveryIsStale) {
  create("q");
  send("q", "x");
  auto first = receive_one("q");
  clock_.advance(kMinute);
  random_value_ = 7;
  receive_one("q");
  EXPECT_EQ(error_of([&] { broker_->extend("q", first.receipt, kMinute); }), ErrorKind::Stale);
}

TEST_F(QueueTest, NackReleasesAtOnceAndSpendsTheReceipt) {
  create("q");
  auto id = send("q", "x");
  auto m = receive_one("q");
  NackOptions options;
  options.reason = "smtp 451";
  EXPECT_EQ(broker_->nack("q", m.receipt, options), clock_.now());
  EXPECT_EQ(error_of([&] { broker_->nack("q", m.receipt, {}); }), ErrorKind::Stale);
  EXPECT_EQ(ack("q", m.receipt), ReceiptOutcome::Stale);
  auto again = receive_one("q");
  EXPECT_EQ(again.id, id);
  EXPECT_EQ(again.receive_count, 2u);
  EXPECT_EQ(again.reason, "smtp 451");
  EXPECT_EQ(stats("q").counters.nacked, 1u);
}

TEST_F(QueueTest, NackWithDelay) {
  create("q");
  send("q", "x");
  auto m = receive_one("q");
  NackOptions options;
  options.delay = 10 * kSecond;
  broker_->nack("q", m.receipt, options);
  auto s = stats("q");
  EXPECT_EQ(s.delayed, 1u);
  EXPECT_EQ(s.in_flight, 0u);
  clock_.advance(10 * kSecond - 1);
  EXPECT_TRUE(receive("q").empty());
  clock_.advance(1);
  EXPECT_EQ(receive("q").size(), 1u);
}

TEST_F(QueueTest, NackBackoffIsFullJitterUnderTheExponentialCeiling) {
  ConfigChange change;
  change.max_receives = 0;
  create("q", change);
  send("q", "x");
  random_value_ = ~0ULL;  // the top of the jitter range
  for (std::uint32_t count = 1; count <= 14; ++count) {
    auto m = receive_one("q");
    ASSERT_EQ(m.receive_count, count);
    NackOptions options;
    options.backoff = true;
    Millis delay = broker_->nack("q", m.receipt, options) - clock_.now();
    Millis ceiling = std::min<Millis>(15 * kMinute, kSecond << (count - 1));
    EXPECT_LE(delay, ceiling) << count;
    EXPECT_GE(delay, ceiling - 1) << count;
    clock_.advance(delay);
  }
}

TEST(Backoff, FullJitterRange) {
  EXPECT_EQ(backoff_delay(1000, 900000, 1, 0.0), 0);
  EXPECT_EQ(backoff_delay(1000, 900000, 1, 0.5), 500);
  EXPECT_EQ(backoff_delay(1000, 900000, 3, 0.5), 2000);
  EXPECT_EQ(backoff_delay(1000, 900000, 30, 0.5), 450000);
  EXPECT_EQ(backoff_delay(1000, 900000, 4000000000u, 0.999999), 899999);
  EXPECT_EQ(backoff_delay(0, 900000, 3, 0.5), 0);
}

// ---- dead letters -------------------------------------------------------------------------

TEST_F(QueueTest, MaxReceivesMovesToDeadLetterQueueOnNextReceive) {
  ConfigChange change;
  change.max_receives = 2;
  create("q", change);
  auto id = send("q", "poison");
  for (int i = 0; i < 2; ++i) {
    auto m = receive_one("q");
    NackOptions options;
    options.reason = "smtp 550 user unknown";
    broker_->nack("q", m.receipt, options);
  }
  EXPECT_EQ(stats("q").visible, 1u);
  EXPECT_TRUE(receive("q").empty());
  auto s = stats("q");
  EXPECT_EQ(s.visible, 0u);
  EXPECT_EQ(s.dead, 1u);
  EXPECT_EQ(s.counters.dead_lettered, 1u);
  auto dead = broker_->dead_letters("q", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  EXPECT_EQ(dead[0].body, "poison");
  EXPECT_EQ(dead[0].receive_count, 2u);
  EXPECT_EQ(dead[0].reason, "smtp 550 user unknown");
  EXPECT_EQ(dead[0].state, MessageState::Dead);
  EXPECT_TRUE(dead[0].first_received_at.has_value());
  EXPECT_EQ(dead[0].dead_at, clock_.now());
}

TEST_F(QueueTest, TimeoutsAloneDeadLetterWithAReason) {
  ConfigChange change;
  change.max_receives = 1;
  create("q", change);
  send("q", "x");
  auto m = receive_one("q");
  clock_.advance(kMinute);
  EXPECT_TRUE(receive("q").empty());
  auto dead = broker_->dead_letters("q", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_NE(dead[0].reason.find("not acknowledged"), std::string::npos);
  EXPECT_EQ(ack("q", m.receipt), ReceiptOutcome::Stale);
}

TEST_F(QueueTest, MaxReceivesZeroNeverDeadLetters) {
  ConfigChange change;
  change.max_receives = 0;
  create("q", change);
  send("q", "x");
  for (int i = 0; i < 50; ++i) {
    auto m = receive_one("q");
    broker_->nack("q", m.receipt, {});
  }
  EXPECT_EQ(stats("q").dead, 0u);
}

TEST_F(QueueTest, RedriveMovesDeadLettersBackKeepingIds) {
  ConfigChange change;
  change.max_receives = 1;
  create("q", change);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(send("q", "m" + std::to_string(i)));
  for (int i = 0; i < 3; ++i) {
    auto m = receive_one("q");
    broker_->nack("q", m.receipt, {});
  }
  EXPECT_TRUE(receive("q").empty());
  EXPECT_EQ(stats("q").dead, 3u);

  RedriveOptions dry;
  dry.dry_run = true;
  EXPECT_EQ(broker_->redrive("q", dry).size(), 3u);
  EXPECT_EQ(stats("q").dead, 3u);

  RedriveOptions one;
  one.ids = {ids[2]};
  auto moved = broker_->redrive("q", one);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].id, ids[2]);
  auto m = receive_one("q");
  EXPECT_EQ(m.id, ids[2]);
  EXPECT_EQ(m.receive_count, 1u);  // counting starts again
  EXPECT_EQ(m.body, "m2");

  RedriveOptions max;
  max.max = 1;
  moved = broker_->redrive("q", max);
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].id, ids[0]);  // oldest first
  EXPECT_EQ(broker_->redrive("q", {}).size(), 1u);
  auto s = stats("q");
  EXPECT_EQ(s.dead, 0u);
  EXPECT_EQ(s.counters.redriven, 3u);
}

TEST_F(QueueTest, RedriveOfUnknownIdMovesNothing) {
  ConfigChange change;
  change.max_receives = 1;
  create("q", change);
  auto id = send("q", "x");
  broker_->nack("q", receive_one("q").receipt, {});
  receive("q");
  RedriveOptions options;
  options.ids = {id, "m999"};
  EXPECT_EQ(error_of([&] { broker_->redrive("q", options); }), ErrorKind::NotFound);
  EXPECT_EQ(stats("q").dead, 1u);
  options.ids = {"not-an-id"};
  EXPECT_EQ(error_of([&] { broker_->redrive("q", options); }), ErrorKind::InvalidData);
}

TEST_F(QueueTest, RedriveRespectsMaxDepth) {
  ConfigChange change;
  change.max_receives = 1;
  change.max_depth = 1;
  create("q", change);
  send("q", "x");
  broker_->nack("q", receive_one("q").receipt, {});
  receive("q");
  send("q", "y");
  EXPECT_EQ(error_of([&] { broker_->redrive("q", {}); }), ErrorKind::Full);
  EXPECT_EQ(stats("q").dead, 1u);
}

TEST_F(QueueTest, PurgeDeadLetters) {
  ConfigChange change;
  change.max_receives = 1;
  create("q", change);
  send("q", "x");
  broker_->nack("q", receive_one("q").receipt, {});
  receive("q");
  EXPECT_EQ(broker_->purge_dead_letters("q"), 1u);
  EXPECT_EQ(stats("q").dead, 0u);
  EXPECT_TRUE(broker_->dead_letters("q", 10).empty());
}

TEST_F(QueueTest, DeadLetterAtOnceKeepsTheReason) {
  create("q");
  auto id = send("q", "bad input");
  auto m = receive_one("q");
  broker_->dead_letter("q", m.receipt, "exit status 65: unparseable");
  auto dead = broker_->dead_letters("q", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  EXPECT_EQ(dead[0].reason, "exit status 65: unparseable");
  EXPECT_EQ(ack("q", m.receipt), ReceiptOutcome::Stale);
  EXPECT_EQ(error_of([&] { broker_->dead_letter("q", m.receipt, "again"); }), ErrorKind::Stale);
}

// ---- consumers: idempotency records, shared rate, next delivery ------------------

TEST_F(QueueTest, DoneKeysAreRecordedWithTheAckAndExpire) {
  create("q");
  send("q", "x");
  auto m = receive_one("q");
  EXPECT_FALSE(broker_->is_done("q", "order-7"));
  EXPECT_EQ(broker_->ack_done("q", m.receipt, "order-7", kHour), ReceiptOutcome::Done);
  EXPECT_TRUE(broker_->is_done("q", "order-7"));
  EXPECT_EQ(stats("q").counters.acked, 1u);
  clock_.advance(kHour);
  EXPECT_FALSE(broker_->is_done("q", "order-7"));
  EXPECT_EQ(error_of([&] { broker_->is_done("q", std::string(300, 'k')); }),
            ErrorKind::InvalidData);
}

TEST_F(QueueTest, DoneKeyIsKeptEvenWhenTheLeaseWasLost) {
  create("q");
  send("q", "x");
  auto first = receive_one("q");
  clock_.advance(kMinute);
  random_value_ = 99;
  receive_one("q");
  EXPECT_EQ(broker_->ack_done("q", first.receipt, "k", kHour), ReceiptOutcome::Stale);
  EXPECT_TRUE(broker_->is_done("q", "k"));
}

TEST_F(QueueTest, SharedRateLimitSpacesStarts) {
  ConfigChange change;
  change.rate = 2;  // one start every 500 ms
  create("q", change);
  for (int i = 0; i < 10; ++i) send("q", "x");
  ReceiveOptions limited;
  limited.max_messages = 10;
  limited.rate_limited = true;
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u);
  EXPECT_TRUE(broker_->receive("q", limited).empty());
  EXPECT_EQ(broker_->next_delivery("q", true), clock_.now() + 500);
  EXPECT_LE(broker_->next_delivery("q", false), clock_.now());
  // Consumers that do not ask for the limit are not held by it.
  EXPECT_EQ(receive("q", 1).size(), 1u);
  clock_.advance(500);
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u);
  // Idle time does not build up a burst.
  clock_.advance(10 * kSecond);
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u);
  EXPECT_TRUE(broker_->receive("q", limited).empty());
}

TEST_F(QueueTest, FastRatesAllowATenthOfASecondBurst) {
  ConfigChange change;
  change.rate = 100;
  create("q", change);
  std::vector<OutgoingMessage> batch(500, OutgoingMessage{"x", {}, ""});
  broker_->send("q", batch, {});
  ReceiveOptions limited;
  limited.max_messages = 500;
  limited.rate_limited = true;
  std::size_t started = 0;
  for (int step = 0; step < 100; ++step) {  // one second in 10 ms steps
    started += broker_->receive("q", limited).size();
    clock_.advance(10);
  }
  EXPECT_GE(started, 100u);
  EXPECT_LE(started, 111u);
}

TEST_F(QueueTest, NextDeliveryFollowsDelaysAndLeases) {
  create("q");
  EXPECT_EQ(broker_->next_delivery("q", false), INT64_MAX);
  SendOptions later;
  later.delay = 5 * kSecond;
  send("q", "x", later);
  EXPECT_EQ(broker_->next_delivery("q", false), clock_.now() + 5 * kSecond);
  clock_.advance(5 * kSecond);
  receive("q", 1, 30 * kSecond);
  EXPECT_EQ(broker_->next_delivery("q", false), clock_.now() + 30 * kSecond);
}

// ---- dedup ----------------------------------------------------------------------------------

TEST_F(QueueTest, DedupIdInsideWindowStoresNothing) {
  create("q");
  auto first = send("q", "x", {}, "order-1");
  std::vector<OutgoingMessage> again{{"y", {}, "order-1"}};
  auto result = broker_->send("q", again, {});
  EXPECT_EQ(result[0].id, first);
  EXPECT_TRUE(result[0].duplicate);
  auto s = stats("q");
  EXPECT_EQ(s.visible, 1u);
  EXPECT_EQ(s.counters.deduplicated, 1u);
  // Still a duplicate after the first was acked, inside the window.
  ack("q", receive_one("q").receipt);
  EXPECT_EQ(send("q", "z", {}, "order-1"), first);
  clock_.advance(5 * kMinute);
  EXPECT_NE(send("q", "z", {}, "order-1"), first);
  EXPECT_EQ(stats("q").visible, 1u);
}

TEST_F(QueueTest, DedupWithinOneBatch) {
  create("q");
  std::vector<OutgoingMessage> batch{{"a", {}, "k"}, {"b", {}, "k"}, {"c", {}, ""}};
  auto results = broker_->send("q", batch, {});
  EXPECT_EQ(results[0].id, results[1].id);
  EXPECT_TRUE(results[1].duplicate);
  EXPECT_EQ(stats("q").visible, 2u);
}

TEST_F(QueueTest, ExpiredDedupEntriesAreCleanedUp) {
  ConfigChange change;
  change.dedup_window = kMinute;
  create("q", change);
  for (int i = 0; i < 10; ++i) send("q", "x", {}, "id-" + std::to_string(i));
  clock_.advance(kMinute);
  send("q", "trigger");
  // A fresh send of an old id is new again.
  std::vector<OutgoingMessage> again{{"x", {}, "id-3"}};
  EXPECT_FALSE(broker_->send("q", again, {})[0].duplicate);
}

// ---- retention, stats, peek, purge ---------------------------------------------------------

TEST_F(QueueTest, MessagesPastRetentionExpire) {
  ConfigChange change;
  change.retention = kHour;
  create("q", change);
  send("q", "old");
  clock_.advance(30 * kMinute);
  auto young = send("q", "young");
  clock_.advance(30 * kMinute);
  auto m = receive_one("q");
  EXPECT_EQ(m.id, young);
  EXPECT_EQ(stats("q").counters.expired, 1u);
}

TEST_F(QueueTest, DeadLettersExpireAfterFourteenDays) {
  ConfigChange change;
  change.max_receives = 1;
  change.retention = 30 * kDay;
  create("q", change);
  send("q", "x");
  broker_->nack("q", receive_one("q").receipt, {});
  receive("q");
  clock_.advance(14 * kDay);
  send("q", "trigger");
  EXPECT_EQ(stats("q").dead, 0u);
  EXPECT_EQ(stats("q").counters.expired, 1u);
}

TEST_F(QueueTest, StatsCountsStatesAndOldestAge) {
  create("q");
  create("empty");
  send("q", "a");
  clock_.advance(kSecond);
  send("q", "b");
  SendOptions later;
  later.delay = kHour;
  send("q", "c", later);
  receive("q");
  clock_.advance(2 * kSecond);
  auto all = broker_->stats("");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "empty");
  EXPECT_FALSE(all[0].oldest_age.has_value());
  const auto& s = all[1];
  EXPECT_EQ(s.visible, 1u);
  EXPECT_EQ(s.in_flight, 1u);
  EXPECT_EQ(s.delayed, 1u);
  EXPECT_EQ(s.oldest_age, 3 * kSecond);
  EXPECT_EQ(s.counters.sent, 3u);
  EXPECT_EQ(s.counters.received, 1u);
  EXPECT_EQ(error_of([&] { broker_->stats("nope"); }), ErrorKind::NotFound);
}

TEST_F(QueueTest, PeekDoesNotReceive) {
  create("q");
  send("q", "a");
  send("q", "b");
  auto m = receive_one("q");
  auto seen = broker_->peek("q", 10);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].state, MessageState::InFlight);
  EXPECT_EQ(seen[1].state, MessageState::Visible);
  EXPECT_EQ(seen[1].receive_count, 0u);
  EXPECT_TRUE(seen[1].receipt.empty());
  EXPECT_EQ(stats("q").counters.received, 1u);
  EXPECT_EQ(broker_->peek("q", 1).size(), 1u);
}

TEST_F(QueueTest, PurgeRemovesEveryLiveMessage) {
  create("q");
  for (int i = 0; i < 5; ++i) send("q", "x");
  auto m = receive_one("q");
  EXPECT_EQ(broker_->purge("q"), 5u);
  auto s = stats("q");
  EXPECT_EQ(s.visible + s.in_flight + s.delayed, 0u);
  EXPECT_EQ(ack("q", m.receipt), ReceiptOutcome::Stale);
}

TEST_F(QueueTest, ReopenedFileKeepsEverything) {
  create("q");
  auto id = send("q", "durable");
  broker_ = open();
  EXPECT_EQ(receive_one("q").id, id);
}

// ---- the file ---------------------------------------------------------------------------------

TEST_F(QueueTest, MissingFileIsNotFoundAndNotCreated) {
  path_ = (dir_ / "sub" / "missing.q").string();
  EXPECT_EQ(error_of([&] { open(); }), ErrorKind::NotFound);
  EXPECT_FALSE(fs::exists(dir_ / "sub"));
  // A new file appears with its first commit, whole: never empty or half made.
  broker_ = open(true);
  EXPECT_FALSE(fs::exists(path_));
  create("q");
  EXPECT_TRUE(fs::exists(path_));
  auto other = open();
  EXPECT_EQ(other->list_queues().size(), 1u);
}

TEST_F(QueueTest, NewFileIsNotLeftBehindWhenNothingWasWritten) {
  broker_.reset();
  path_ = (dir_ / "never.q").string();
  open(true).reset();
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(fs::exists(path_ + ".creating"));
  EXPECT_FALSE(fs::exists(path_ + "-lock"));
}

TEST_F(QueueTest, CreatorsTakeTurnsAndTheSecondUsesTheFirstOnesFile) {
  broker_.reset();
  path_ = (dir_ / "race.q").string();
  auto first = open(true);
  // The first creator has not committed yet: the second waits for it.
  EXPECT_EQ(error_of([&] { open(true, 50); }), ErrorKind::Busy);
  first->create_queue("a", {});
  auto second = open(true);
  second->create_queue("b", {});
  EXPECT_EQ(first->list_queues().size(), 2u);
  EXPECT_EQ(first->verify(), std::vector<std::string>{});
}

TEST_F(QueueTest, ForeignFileIsRefusedAndLeftAlone) {
  broker_.reset();
  path_ = (dir_ / "notes.txt").string();
  std::string text(10000, 'x');
  std::ofstream(path_) << text;
  EXPECT_EQ(error_of([&] { open(); }), ErrorKind::Io);
  EXPECT_EQ(error_of([&] { open(true); }), ErrorKind::Io);
  EXPECT_EQ(slurp(path_), text);
  EXPECT_FALSE(fs::exists(path_ + "-lock"));
}

TEST_F(QueueTest, EmptyFileIsRefusedUnlessCreating) {
  broker_.reset();
  path_ = (dir_ / "empty.q").string();
  std::ofstream(path_).close();
  EXPECT_EQ(error_of([&] { open(); }), ErrorKind::Io);
  open(true)->create_queue("q", {});
}

TEST_F(QueueTest, TruncatedFileIsRefusedAndLeftAlone) {
  create("q");
  for (int i = 0; i < 200; ++i) send("q", std::string(500, 'x'));
  broker_.reset();
  fs::resize_file(path_, fs::file_size(path_) - 4096);
  const auto before = slurp(path_);
  try {
    open();
    FAIL() << "opened a truncated file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(path_), before);
}

TEST_F(QueueTest, LmdbFileOfAnotherProgramIsRefused) {
  broker_.reset();
  path_ = (dir_ / "other.mdb").string();
  MDB_env* env;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_open(env, path_.c_str(), MDB_NOSUBDIR, 0644), 0);
  MDB_txn* txn;
  MDB_dbi dbi;
  ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
  ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  MDB_val k{3, const_cast<char*>("key")}, v{5, const_cast<char*>("value")};
  ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  auto before = slurp(path_);
  EXPECT_EQ(error_of([&] { open(); }), ErrorKind::Io);
  EXPECT_EQ(error_of([&] { open(true); }), ErrorKind::Io);
  EXPECT_EQ(slurp(path_), before);
}

TEST_F(QueueTest, NewerFormatVersionIsRefused) {
  create("q");
  broker_.reset();
  poke(path_, "meta", [](MDB_txn* txn, MDB_dbi dbi) {
    std::uint32_t version = 99;
    MDB_val k{8, const_cast<char*>("q-format")}, v{4, &version};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  });
  try {
    open();
    FAIL() << "opened a format 99 file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("format 99"), std::string::npos);
  }
}

TEST_F(QueueTest, DamagedRecordIsReportedNeverReturned) {
  create("q");
  send("q", "precious");
  broker_.reset();
  poke(path_, "bodies", [](MDB_txn* txn, MDB_dbi dbi) {
    MDB_cursor* c;
    ASSERT_EQ(mdb_cursor_open(txn, dbi, &c), 0);
    MDB_val k, v;
    ASSERT_EQ(mdb_cursor_get(c, &k, &v, MDB_FIRST), 0);
    std::string damaged(static_cast<char*>(v.mv_data), v.mv_size);
    damaged.back() ^= 0x20;
    MDB_val nv{damaged.size(), damaged.data()};
    ASSERT_EQ(mdb_cursor_put(c, &k, &nv, MDB_CURRENT), 0);
    mdb_cursor_close(c);
  });
  broker_ = open();
  EXPECT_EQ(error_of([&] { receive("q"); }), ErrorKind::Io);
  EXPECT_EQ(error_of([&] { broker_->peek("q", 1); }), ErrorKind::Io);
  EXPECT_EQ(broker_->verify(),
            std::vector<std::string>{"queue q: message m1: body damaged (checksum mismatch)"});
  verify_at_end_ = false;
}

TEST_F(QueueTest, WriterLockWaitIsBounded) {
  create("q");
  int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  auto impatient = open(false, 100);
  auto start = std::chrono::steady_clock::now();
  try {
    std::vector<OutgoingMessage> batch{{"x", {}, ""}};
    impatient->send("q", batch, {});
    FAIL() << "sent while another process held the writer lock";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Busy);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Readers are not blocked by a writer.
  EXPECT_EQ(impatient->stats("q").at(0).visible, 0u);
  flock(fd, LOCK_UN);
  ::close(fd);
  std::vector<OutgoingMessage> batch{{"x", {}, ""}};
  impatient->send("q", batch, {});
}

TEST_F(QueueTest, FilesAreCreatedWithUmaskPermissions) {
  broker_.reset();
  path_ = (dir_ / "shared.q").string();
  mode_t old = umask(002);
  open(true)->create_queue("q", {});  // a commit also makes the doorbell, FILE-wake
  umask(old);
  EXPECT_EQ(fs::status(path_).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::group_write | fs::perms::others_read);
  for (const char* companion : {"-lock", "-wake"})
    EXPECT_EQ(fs::status(path_ + companion).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                  fs::perms::group_write | fs::perms::others_read)
        << companion;
}

TEST_F(QueueTest, LongPollReturnsEmptyAfterTheWait) {
  // Real time for the wait itself: the wait is on the file, not the clock.
  broker_.reset();
  LmdbOptions options;
  options.open.path = path_;
  options.open.create = true;
  broker_ = open_lmdb_broker(options);
  broker_->create_queue("q", {});
  ReceiveOptions receive_options;
  receive_options.wait = 150;
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(broker_->receive("q", receive_options).empty());
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(140));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

}  // namespace

// ---- seams between features (issues 12 and 17) -----------------------------------

namespace {

// Queue s with max receives 1 and n messages, the first `dead` of them dead letters.
void dead_letter_first(Broker& broker, FakeClock& clock, int n, int dead) {
  ConfigChange change;
  change.max_receives = 1;
  change.visibility_timeout = 0;
  broker.create_queue("s", change);
  for (int i = 1; i <= n; ++i) broker.send("s", {{"body-" + std::to_string(i), {}, ""}}, {});
  ReceiveOptions options;
  options.max_messages = static_cast<std::uint32_t>(dead);
  broker.receive("s", options);
  clock.advance(1);
  broker.receive("s", options);  // received once already: dead-lettered
}

Message imported(const std::string& id, const std::string& body, Millis sent_at,
                 MessageState state = MessageState::Visible) {
  Message m;
  m.id = id;
  m.body = body;
  m.sent_at = sent_at;
  m.state = state;
  return m;
}

}  // namespace

// Issue 12, break 1: `redrive --id m3 --id m3` moved m3 twice and broke the counters.
TEST_F(QueueTest, RepeatedIdsInRedriveAndDeleteCountOnce) {
  dead_letter_first(*broker_, clock_, 3, 3);
  ASSERT_EQ(stats("s").dead, 3u);
  RedriveOptions twice;
  twice.ids = {"m3", "m3"};
  EXPECT_EQ(broker_->redrive("s", twice).size(), 1u);
  auto s = stats("s");
  EXPECT_EQ(s.visible, 1u);
  EXPECT_EQ(s.dead, 2u);
  EXPECT_EQ(s.counters.redriven, 1u);
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
  EXPECT_EQ(broker_->delete_dead_letters("s", {"m1", "m1"}), std::vector<std::string>{});
  EXPECT_EQ(stats("s").dead, 1u);
}

// Issue 12, break 2: importing id mffffffffffffffff wrapped next-seq and every
// later send failed; verify said consistent.
TEST_F(QueueTest, ImportedIdsNeverExhaustTheSequence) {
  create("i");
  for (const char* id : {"mffffffffffffffff", "mfffffffffffffff0", "m10000000000000"}) {
    auto ids = broker_->import_messages("i", {imported(id, "x", clock_.now())}, false);
    EXPECT_NE(ids.at(0), id) << "an id at the end of the sequence space was kept";
    for (int i = 0; i < 20; ++i) send("i", "after");
  }
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
}

TEST_F(QueueTest, VerifyFlagsNextSeqNotAboveTheLargestId) {
  create("q");
  send("q", "a");
  send("q", "b");
  broker_.reset();
  poke(path_, "meta", [](MDB_txn* txn, MDB_dbi dbi) {
    std::uint64_t two = 2;
    MDB_val k{8, const_cast<char*>("next-seq")}, v{8, &two};
    ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
  });
  broker_ = open();
  auto problems = broker_->verify();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("next-seq"), std::string::npos) << problems[0];
  verify_at_end_ = false;
}

// Issue 12, break 9: import accepted what send refuses and lost dedup entries.
TEST_F(QueueTest, ImportValidatesLikeSendAndRestoresDedup) {
  create("i");
  auto refused = [&](Message m) {
    auto before = stats("i");
    EXPECT_EQ(error_of([&] { broker_->import_messages("i", {m}, false); }), ErrorKind::InvalidData)
        << m.id;
    EXPECT_EQ(stats("i").visible, before.visible);
  };
  refused(imported("m1", "future", clock_.now() + kHour));
  auto grouped = imported("m1", "group on a standard queue", clock_.now());
  grouped.group = "g";
  refused(grouped);
  auto far = imported("m1", "visible past retention", clock_.now(), MessageState::Delayed);
  far.visible_at = clock_.now() + 5 * kDay;
  refused(far);
  Message big = imported("m1", "x", clock_.now());
  big.attributes = {{"a", std::string(kMaxAttributeBytes, 'v')}};
  refused(big);

  auto m = imported("m7", "once", clock_.now() - kMinute);
  m.dedup_id = "order-1";
  broker_->import_messages("i", {m}, false);
  std::vector<OutgoingMessage> again{{"once", {}, "order-1"}};
  auto sent = broker_->send("i", again, {});
  EXPECT_TRUE(sent.at(0).duplicate) << "the dedup id was not restored by import";
  EXPECT_EQ(sent.at(0).id, "m7");
}

// Issue 12 break 1 (import) and issue 17 §3: a repeated id is one message, and
// ids colliding with this file's renumber the import in order.
TEST_F(QueueTest, ImportTreatsARepeatAsOneAndRenumbersInOrder) {
  create("i");
  send("i", "occupies m1");
  auto ids = broker_->import_messages(
      "i",
      {imported("m1", "a", clock_.now()), imported("m2", "b", clock_.now()),
       imported("m2", "b", clock_.now())},
      false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], ids[2]);
  EXPECT_EQ(stats("i").visible, 3u);
  auto got = receive("i", 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].body, "a");
  EXPECT_EQ(got[2].body, "b");
}

// Issue 17 §2: a dead letter older than the queue's retention, redriven, was
// expired by the next write.
TEST_F(QueueTest, RedriveOfAnOldDeadLetterDeliversItLikeNew) {
  dead_letter_first(*broker_, clock_, 1, 1);
  clock_.advance(6 * kDay);  // retention 4 d, dead letters kept 14 d
  ASSERT_EQ(broker_->redrive("s", {}).size(), 1u);
  send("s", "a write");
  auto s = stats("s");
  EXPECT_EQ(s.counters.expired, 0u);
  EXPECT_EQ(s.visible, 2u);
  // And its retention runs from the redrive: it expires 4 d later, not before.
  clock_.advance(4 * kDay - 1);
  send("s", "another write");
  EXPECT_EQ(stats("s").counters.expired, 0u);
  clock_.advance(2);
  send("s", "and another");
  EXPECT_EQ(stats("s").counters.expired, 2u);
}

// Issue 17 §2: expiry walked ids in order and stopped at the first unexpired
// message, so one young message with a low id held back the rest.
TEST_F(QueueTest, RetentionExpiresByTimeNotByIdOrder) {
  dead_letter_first(*broker_, clock_, 1, 1);  // m1 dead
  send("s", "m2");
  send("s", "m3");
  clock_.advance(3 * kDay);
  broker_->redrive("s", {});  // m1 is young again, ids before m2, m3
  clock_.advance(1 * kDay + 1);
  send("s", "a write");
  auto s = stats("s");
  EXPECT_EQ(s.counters.expired, 2u);
  EXPECT_EQ(s.visible, 2u);  // m1 and the new one
}

// Issue 17 §3: redrive --to ignored the target's rules.
TEST_F(QueueTest, RedriveToAnotherQueueAppliesItsRules) {
  dead_letter_first(*broker_, clock_, 1, 1);
  ConfigChange small;
  small.max_size = 2;
  create("small", small);
  RedriveOptions to;
  to.to = "small";
  EXPECT_EQ(error_of([&] { broker_->redrive("s", to); }), ErrorKind::InvalidData);
  EXPECT_EQ(stats("s").dead, 1u);
}

// Issue 17 §3: a redrive of chosen ids in batches (--rate) must pass over one
// that vanished meanwhile.
TEST_F(QueueTest, RedriveCanPassOverVanishedDeadLetters) {
  dead_letter_first(*broker_, clock_, 3, 3);
  broker_->delete_dead_letters("s", {"m2"});
  RedriveOptions batch;
  batch.ids = {"m1", "m2", "m3"};
  EXPECT_EQ(error_of([&] { broker_->redrive("s", batch); }), ErrorKind::NotFound);
  batch.skip_missing = true;
  EXPECT_EQ(broker_->redrive("s", batch).size(), 2u);
}

// Issue 12 break 5 and issue 17 §2: the shared rate state outlived a rate
// change, and a clock ahead stored a far future.
TEST_F(QueueTest, RateStateFollowsRateChangesAndNeverRunsAhead) {
  ConfigChange slow;
  slow.rate = 1.0 / 3600;
  create("q", slow);
  for (int i = 0; i < 5; ++i) send("q", "x");
  ReceiveOptions limited;
  limited.rate_limited = true;
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u);
  ConfigChange fast;
  fast.rate = 100;
  broker_->configure("q", fast);
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u) << "a rate change kept the old wait";

  // A consumer whose clock is a day ahead takes a start ...
  const Millis real = clock_.now();
  clock_.advance(kDay);
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u);
  // ... and the others, on the right clock, wait at most one interval.
  clock_.set(real + 1000);
  EXPECT_LE(broker_->next_delivery("q", true), clock_.now() + 10);
  auto first = broker_->receive("q", limited).size();  // the first write pulls the future back
  ASSERT_EQ(first, 0u);
  clock_.advance(10);
  EXPECT_EQ(broker_->receive("q", limited).size(), 1u);
}
