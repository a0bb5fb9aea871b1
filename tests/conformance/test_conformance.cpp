// The rules every backend keeps (libq/broker.hpp, "what a backend
// implements"), run against each backend through the one factory
// (libq/backends.hpp): the file backend always, and a NATS cluster when
// Q_CONFORMANCE_NATS names one (conformance_nats.sh starts it). A rule that
// lives in one backend only fails here on the other.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "libq/backends.hpp"
#include "libq/broker.hpp"
#include "libq/error.hpp"

namespace {

using q::ErrorKind;
using q::ReceiptOutcome;

std::string nats_location() {
  const char* env = std::getenv("Q_CONFORMANCE_NATS");
  return env ? env : "";
}

std::vector<std::string> backends() {
  std::vector<std::string> names{"file"};
  if (!nats_location().empty()) names.push_back("nats");
  return names;
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    static std::mt19937_64 rng{std::random_device{}()};
    suffix_ = std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000);
    q::BrokerRequest request;
    if (GetParam() == "nats") {
      if (!q::has_nats_backend()) GTEST_SKIP() << "this test binary has no NATS backend";
      request.location = nats_location();
    } else {
      dir_ = std::filesystem::temp_directory_path() / ("q-conformance-" + suffix_);
      std::filesystem::create_directories(dir_);
      request.location = (dir_ / "q.db").string();
      request.create = true;
      request.durable = false;  // the rules, not the disk
    }
    broker_ = q::open_broker(request);
  }
  void TearDown() override {
    for (const auto& name : made_) {
      try {
        broker_->delete_queue(name);
      } catch (const q::Error&) {
      }
    }
    broker_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A queue of this test's own (the cluster is shared by every test).
  std::string make(const std::string& base, q::ConfigChange change = {}) {
    std::string name = base + "-" + suffix_;
    broker_->create_queue(name, change);
    made_.push_back(name);
    return name;
  }
  std::string send(const std::string& queue, const std::string& body, const std::string& group = "",
                   const std::string& dedup = "") {
    q::OutgoingMessage m;
    m.body = body;
    m.group = group;
    m.dedup_id = dedup;
    return broker_->send(queue, {m}, {}).at(0).id;
  }
  std::vector<q::Message> receive(const std::string& queue, std::uint32_t n = 1) {
    q::ReceiveOptions options;
    options.max_messages = n;
    return broker_->receive(queue, options);
  }
  q::QueueStats stats(const std::string& queue) { return broker_->stats(queue).at(0); }
  ErrorKind kind_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const q::Error& e) {
      return e.kind();
    }
    ADD_FAILURE() << "no error";
    return ErrorKind::Io;
  }

  std::unique_ptr<q::Broker> broker_;
  std::filesystem::path dir_;
  std::string suffix_;
  std::vector<std::string> made_;
};

TEST_P(Conformance, SendReceiveAckCountsEachOnce) {
  auto queue = make("basic");
  std::string id = send(queue, "hello");
  auto got = receive(queue);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id);
  EXPECT_EQ(got[0].body, "hello");
  EXPECT_EQ(got[0].receive_count, 1u);
  auto st = stats(queue);
  EXPECT_EQ(st.visible, 0u);
  EXPECT_EQ(st.in_flight, 1u);
  auto acked = broker_->ack(queue, {got[0].receipt});
  ASSERT_EQ(acked.size(), 1u);
  EXPECT_EQ(acked[0].outcome, ReceiptOutcome::Done);
  st = stats(queue);
  EXPECT_EQ(st.visible + st.in_flight + st.delayed, 0u);
  EXPECT_EQ(st.counters.sent, 1u);
  EXPECT_EQ(st.counters.received, 1u);
  EXPECT_EQ(st.counters.acked, 1u);
  EXPECT_TRUE(receive(queue).empty());
}

TEST_P(Conformance, AnOldReceiptIsStaleOnceTheMessageWasDeliveredAgain) {
  auto queue = make("fenced");
  send(queue, "x");
  auto first = receive(queue);
  ASSERT_EQ(first.size(), 1u);
  broker_->nack(queue, first[0].receipt, {});
  auto second = receive(queue);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0].receipt, first[0].receipt);
  EXPECT_EQ(second[0].receive_count, 2u);
  EXPECT_EQ(broker_->ack(queue, {first[0].receipt}).at(0).outcome, ReceiptOutcome::Stale);
  EXPECT_EQ(kind_of([&] { broker_->extend(queue, first[0].receipt, 10 * q::kSecond); }),
            ErrorKind::Stale);
  EXPECT_EQ(kind_of([&] { broker_->nack(queue, first[0].receipt, {}); }), ErrorKind::Stale);
  // The stale ones changed nothing: the new delivery still acks, once.
  EXPECT_EQ(broker_->ack(queue, {second[0].receipt}).at(0).outcome, ReceiptOutcome::Done);
  EXPECT_EQ(broker_->ack(queue, {second[0].receipt}).at(0).outcome, ReceiptOutcome::Stale);
  EXPECT_EQ(stats(queue).counters.acked, 1u);
  // Each refused ack counts as a stale ack (a receipt given twice in one call, once);
  // extend and nack refused are not acks.
  auto twice = broker_->ack(queue, {first[0].receipt, first[0].receipt});
  EXPECT_EQ(twice.at(1).outcome, ReceiptOutcome::Stale);
  EXPECT_EQ(stats(queue).counters.stale_acks, 3u);
}

TEST_P(Conformance, AMalformedReceiptIsAnOutcomeOrInvalidData) {
  auto queue = make("malformed");
  EXPECT_EQ(broker_->ack(queue, {"not-a-receipt"}).at(0).outcome, ReceiptOutcome::Malformed);
  EXPECT_EQ(kind_of([&] { broker_->extend(queue, "m1.zz", q::kSecond); }), ErrorKind::InvalidData);
}

TEST_P(Conformance, AMissingQueueIsNotFound) {
  std::string missing = "missing-" + suffix_;
  EXPECT_EQ(kind_of([&] { send(missing, "x"); }), ErrorKind::NotFound);
  EXPECT_EQ(kind_of([&] { receive(missing); }), ErrorKind::NotFound);
  EXPECT_EQ(kind_of([&] { broker_->stats(missing); }), ErrorKind::NotFound);
  EXPECT_FALSE(broker_->queue_config(missing).has_value());
}

TEST_P(Conformance, QueueConfigIsTheSettingsStatsShows) {
  q::ConfigChange change;
  change.max_depth = 7;
  change.visibility_timeout = 45 * q::kSecond;
  auto queue = make("settings", change);
  auto config = broker_->queue_config(queue);
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->max_depth, 7u);
  EXPECT_EQ(config->visibility_timeout, 45 * q::kSecond);
  EXPECT_EQ(config->max_depth, stats(queue).config.max_depth);
}

// A batch is taken and acked step by step for all its messages together
// (nats/pipeline.hpp): each receipt still has its own outcome.
TEST_P(Conformance, AnAckOfManyReceiptsSettlesEachOnItsOwn) {
  auto queue = make("batch");
  for (int i = 0; i < 4; ++i) send(queue, "m" + std::to_string(i));
  auto got = receive(queue, 4);
  ASSERT_EQ(got.size(), 4u);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].body, "m" + std::to_string(i));
  broker_->nack(queue, got[3].receipt, {});
  auto again = receive(queue, 4);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, got[3].id);
  auto acked = broker_->ack(queue, {got[0].receipt, got[1].receipt, got[3].receipt, got[2].receipt,
                                    got[2].receipt, "junk", again[0].receipt});
  ASSERT_EQ(acked.size(), 7u);
  std::vector<ReceiptOutcome> want{
      ReceiptOutcome::Done, ReceiptOutcome::Done,      ReceiptOutcome::Stale, ReceiptOutcome::Done,
      ReceiptOutcome::Done, ReceiptOutcome::Malformed, ReceiptOutcome::Done};
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(acked[i].outcome, want[i]) << "receipt " << i << ": " << acked[i].receipt;
  auto st = stats(queue);
  EXPECT_EQ(st.visible + st.in_flight + st.delayed, 0u);
  EXPECT_EQ(st.counters.received, 5u);
  EXPECT_EQ(st.counters.acked, 4u);
  EXPECT_EQ(broker_->ack(queue, {got[0].receipt, got[1].receipt}).at(1).outcome,
            ReceiptOutcome::Stale);
  EXPECT_TRUE(receive(queue, 4).empty());
}

TEST_P(Conformance, AFullQueueRefusesTheWholeSend) {
  q::ConfigChange change;
  change.max_depth = 2;
  auto queue = make("full", change);
  std::vector<q::OutgoingMessage> three(3);
  for (auto& m : three) m.body = "b";
  EXPECT_EQ(kind_of([&] { broker_->send(queue, three, {}); }), ErrorKind::Full);
  EXPECT_EQ(stats(queue).visible, 0u);
  EXPECT_EQ(stats(queue).counters.sent, 0u);
  three.pop_back();
  EXPECT_EQ(broker_->send(queue, three, {}).size(), 2u);
  EXPECT_EQ(kind_of([&] { send(queue, "c"); }), ErrorKind::Full);
  EXPECT_EQ(stats(queue).visible, 2u);
}

// q work --to's round: each step acked and passed on as ack_and_send would,
// a step DST refuses left undone alone, a malformed receipt an outcome.
TEST_P(Conformance, StageStepsTogetherSettleEachOnItsOwn) {
  auto src = make("stage-src");
  q::ConfigChange small;
  small.max_depth = 2;
  auto dst = make("stage-dst", small);
  for (const char* body : {"a", "b", "c"}) send(src, body);
  auto got = receive(src, 3);
  ASSERT_EQ(got.size(), 3u);
  auto out = [](const std::string& body) {
    q::OutgoingMessage m;
    m.body = body;
    return std::vector<q::OutgoingMessage>{m};
  };
  std::vector<q::StageStep> steps{{got[0].receipt, out("A")},
                                  {"not-a-receipt", out("X")},
                                  {got[1].receipt, out("B")},
                                  {got[2].receipt, out("C")}};  // DST holds 2: refused
  auto results = broker_->ack_and_send_each(src, dst, steps, {});
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].outcome, ReceiptOutcome::Done);
  EXPECT_EQ(results[0].sent.size(), 1u);
  EXPECT_EQ(results[1].outcome, ReceiptOutcome::Malformed);
  EXPECT_TRUE(results[1].sent.empty());
  EXPECT_EQ(results[2].outcome, ReceiptOutcome::Done);
  EXPECT_TRUE(results[0].refused.empty());
  EXPECT_FALSE(results[3].refused.empty());
  EXPECT_TRUE(results[3].sent.empty());
  EXPECT_EQ(stats(dst).visible, 2u);
  EXPECT_EQ(stats(dst).counters.sent, 2u);
  EXPECT_EQ(stats(src).counters.acked, 2u);
  EXPECT_EQ(stats(src).in_flight, 1u);  // c: still leased, its output refused
  auto done = broker_->ack_and_send_each(src, dst, {{got[2].receipt, {}}}, {});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, ReceiptOutcome::Done);
  EXPECT_EQ(stats(src).in_flight, 0u);
  EXPECT_EQ(kind_of([&] { broker_->ack_and_send_each(src, src, {}, {}); }), ErrorKind::Usage);
}

TEST_P(Conformance, ABodyOverTheMaxSizeIsRefusedAndNothingStored) {
  q::ConfigChange change;
  change.max_size = 10;
  auto queue = make("size", change);
  EXPECT_EQ(kind_of([&] { send(queue, std::string(11, 'x')); }), ErrorKind::InvalidData);
  EXPECT_EQ(stats(queue).visible, 0u);
  send(queue, std::string(10, 'x'));
  EXPECT_EQ(stats(queue).visible, 1u);
}

TEST_P(Conformance, ADedupIdWithinTheWindowStoresOnce) {
  auto queue = make("dedup");
  std::string first = send(queue, "a", "", "order-1");
  q::OutgoingMessage again;
  again.body = "a";
  again.dedup_id = "order-1";
  auto result = broker_->send(queue, {again}, {});
  EXPECT_EQ(result.at(0).id, first);
  EXPECT_TRUE(result.at(0).duplicate);
  EXPECT_EQ(stats(queue).visible, 1u);
  EXPECT_EQ(stats(queue).counters.sent, 1u);
  EXPECT_EQ(stats(queue).counters.deduplicated, 1u);
}

TEST_P(Conformance, AFifoGroupIsDeliveredInOrderOneAtATime) {
  q::ConfigChange change;
  change.fifo = true;
  auto queue = make("fifo", change);
  std::string a = send(queue, "1", "g", "d1");
  std::string b = send(queue, "2", "g", "d2");
  std::string c = send(queue, "3", "h", "d3");
  q::ReceiveOptions options;
  options.max_messages = 10;
  options.one_per_group = true;
  auto got = broker_->receive(queue, options);
  ASSERT_EQ(got.size(), 2u);  // g's head and h's head
  std::vector<std::string> ids{got[0].id, got[1].id};
  EXPECT_NE(std::find(ids.begin(), ids.end(), a), ids.end());
  EXPECT_NE(std::find(ids.begin(), ids.end(), c), ids.end());
  EXPECT_TRUE(broker_->receive(queue, options).empty());  // g held, h empty
  for (const auto& m : got) broker_->ack(queue, {m.receipt});
  auto next = broker_->receive(queue, options);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, b);
}

TEST_P(Conformance, TheReceivePastMaxReceivesDeadLettersWithAReason) {
  q::ConfigChange change;
  change.max_receives = 1;
  auto queue = make("poison", change);
  std::string id = send(queue, "bad");
  auto got = receive(queue);
  ASSERT_EQ(got.size(), 1u);
  q::NackOptions nack;
  nack.reason = "smtp 550";
  broker_->nack(queue, got[0].receipt, nack);
  EXPECT_TRUE(receive(queue).empty());
  auto dead = broker_->dead_letters(queue, 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  EXPECT_EQ(dead[0].reason, "smtp 550");
  auto st = stats(queue);
  EXPECT_EQ(st.dead, 1u);
  EXPECT_EQ(st.counters.dead_lettered, 1u);
  EXPECT_EQ(st.visible + st.in_flight, 0u);
  // Redrive brings it back under its own id, its receives counted afresh.
  auto moved = broker_->redrive(queue, {});
  ASSERT_EQ(moved.size(), 1u);
  auto again = receive(queue);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, id);
  EXPECT_EQ(again[0].receive_count, 1u);
}

TEST_P(Conformance, PeekChangesNothing) {
  auto queue = make("peek");
  send(queue, "x");
  auto seen = broker_->peek(queue, 10);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].receive_count, 0u);
  auto st = stats(queue);
  EXPECT_EQ(st.visible, 1u);
  EXPECT_EQ(st.counters.received, 0u);
  EXPECT_EQ(receive(queue).at(0).receive_count, 1u);
}

TEST_P(Conformance, APausedQueueDeliversNothingUntilResumed) {
  auto queue = make("pause");
  send(queue, "x");
  broker_->pause(queue, 0, "deploy");
  EXPECT_TRUE(receive(queue).empty());
  ASSERT_TRUE(stats(queue).pause.has_value());
  EXPECT_EQ(stats(queue).pause->reason, "deploy");
  auto ended = broker_->resume(queue);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(receive(queue).size(), 1u);
}

TEST_P(Conformance, CreateAgreesOrRefusesAndAKindIsFixed) {
  q::ConfigChange change;
  change.max_receives = 3;
  auto queue = make("create", change);
  EXPECT_FALSE(broker_->create_queue(queue, change));
  q::ConfigChange other;
  other.max_receives = 4;
  EXPECT_EQ(kind_of([&] { broker_->create_queue(queue, other); }), ErrorKind::Usage);
  q::ConfigChange fifo;
  fifo.fifo = true;
  EXPECT_EQ(kind_of([&] { broker_->configure(queue, fifo); }), ErrorKind::Usage);
  // A change keeps what it does not name.
  q::ConfigChange visibility;
  visibility.visibility_timeout = 7 * q::kSecond;
  auto config = broker_->configure(queue, visibility);
  EXPECT_EQ(config.max_receives, 3u);
  EXPECT_EQ(config.visibility_timeout, 7 * q::kSecond);
}

TEST_P(Conformance, ADeletedQueueComesBackEmpty) {
  auto queue = make("delete");
  send(queue, "a");
  send(queue, "b");
  receive(queue);
  auto removed = broker_->delete_queue(queue);
  EXPECT_EQ(removed.messages, 2u);
  EXPECT_EQ(kind_of([&] { broker_->stats(queue); }), ErrorKind::NotFound);
  EXPECT_TRUE(broker_->create_queue(queue, {}));
  auto st = stats(queue);
  EXPECT_EQ(st.visible + st.in_flight + st.dead, 0u);
  EXPECT_EQ(st.counters.sent, 0u);
  EXPECT_TRUE(receive(queue).empty());
}

TEST_P(Conformance, ImportCountsADeadLetterAsSentAndDeadLettered) {
  auto queue = make("import");
  q::Message live;
  live.id = "m7";
  live.body = "live";
  live.sent_at = 0;
  q::Message dead = live;
  dead.id = "m8";
  dead.body = "dead";
  dead.state = q::MessageState::Dead;
  dead.reason = "exit 65";
  const q::Millis now = q::SystemClock().now();
  live.sent_at = dead.sent_at = now;
  dead.dead_at = now;
  broker_->import_messages(queue, {live, dead}, false);
  auto st = stats(queue);
  EXPECT_EQ(st.visible, 1u);
  EXPECT_EQ(st.dead, 1u);
  EXPECT_EQ(st.counters.sent, 2u);
  EXPECT_EQ(st.counters.dead_lettered, 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return info.param; });

}  // namespace

int main(int argc, char** argv) {
#ifdef Q_CONFORMANCE_HAS_NATS
  q::use_nats_backend();
#endif
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
