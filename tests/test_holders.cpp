// Holders of leases (issue 14): a lease named after a living process is
// released at once when that process is gone. Liveness comes from an
// injected probe and time from a fake clock; the real probe is tested on
// child processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "libq/holder.hpp"
#include "libq/lmdb/broker.hpp"
#include "libq/lmdb/queue_view.hpp"
#include "libq/lmdb/records.hpp"
#include "support.hpp"

using namespace q;
using q::testing::poke;

namespace {

class HolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("test.q");
    broker_ = open(true);
    ConfigChange change;
    change.visibility_timeout = 5 * kMinute;
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
    options.random = [this] { return ++nonce_; };
    options.holder_alive = [this](const Holder& h) {
      ++probes_;
      return !dead_.count(h.pid);
    };
    return open_lmdb_broker(options);
  }

  std::string send(const std::string& body, const std::string& queue = "jobs",
                   const std::string& group = "") {
    std::vector<OutgoingMessage> batch{{body, {}, "", group}};
    return broker_->send(queue, std::move(batch), {}).at(0).id;
  }

  std::vector<Message> receive(std::optional<Holder> holder = std::nullopt,
                               const std::string& queue = "jobs") {
    ReceiveOptions options;
    options.holder = holder;
    return broker_->receive(queue, options);
  }

  q::testing::TempDir dir_;
  std::string path_;
  FakeClock clock_;
  std::uint64_t nonce_ = 0;
  std::set<std::uint32_t> dead_;
  int probes_ = 0;
  std::unique_ptr<Broker> broker_;
  const Holder worker_{4242, 777, 1};
};

TEST_F(HolderTest, DeadHolderReleasedByNextWriteKeepingItsReceiveCount) {
  auto id = send("a");
  ASSERT_EQ(receive(worker_).size(), 1u);
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  send("b");  // any write to the queue
  auto again = receive();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, id);
  EXPECT_EQ(again[0].receive_count, 2u);
  EXPECT_EQ(again[0].reason, kHolderDied);
}

TEST_F(HolderTest, LivingHolderKeepsItsLeaseUntilTheTimeout) {
  send("a");
  ASSERT_EQ(receive(worker_).size(), 1u);
  clock_.advance(5 * kMinute - 1);
  EXPECT_TRUE(receive().empty());
  clock_.advance(1);
  EXPECT_EQ(receive().size(), 1u);  // the timeout still applies
}

TEST_F(HolderTest, LivenessIsCheckedAtMostEveryInterval) {
  send("a");
  send("b");
  ASSERT_EQ(receive(worker_).size(), 1u);
  probes_ = 0;
  for (int i = 0; i < 10; ++i) {
    clock_.advance(kHolderCheckEvery / 10 - 1);
    send("more");
  }
  EXPECT_EQ(probes_, 0) << "no probe within the interval, whatever the writes";
  clock_.advance(kHolderCheckEvery);
  send("more");
  EXPECT_EQ(probes_, 1) << "one probe per holder per interval";
  send("more");
  EXPECT_EQ(probes_, 1);
}

TEST_F(HolderTest, DeadHolderAtMaxReceivesIsDeadLetteredWithTheReason) {
  ConfigChange change;
  change.max_receives = 1;
  broker_->configure("jobs", change);
  send("a");
  ASSERT_EQ(receive(worker_).size(), 1u);
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  EXPECT_TRUE(receive().empty());
  auto dead = broker_->dead_letters("jobs", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].reason, kHolderDied);
}

TEST_F(HolderTest, OnlyTheDeadHoldersLeasesAreReleased) {
  send("a");
  send("b");
  send("c");
  Holder other{5151, 9, 1};
  ASSERT_EQ(receive(worker_).size(), 1u);
  ASSERT_EQ(receive(other).size(), 1u);
  ASSERT_EQ(receive().size(), 1u);  // held by nobody
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  auto released = receive();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].body, "a");
  EXPECT_TRUE(receive().empty());
}

TEST_F(HolderTest, AcknowledgedOrRedeliveredLeasesAreNotReleased) {
  send("a");
  auto first = receive(worker_);
  ASSERT_EQ(first.size(), 1u);
  broker_->ack("jobs", {first[0].receipt});
  send("b");
  auto b = receive(worker_);
  ASSERT_EQ(b.size(), 1u);
  // Its lease ran out and another consumer took it: no longer the dead one's.
  clock_.advance(5 * kMinute);
  auto taken = receive();
  ASSERT_EQ(taken.size(), 1u);
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  send("c");
  auto next = receive();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].body, "c");
  EXPECT_EQ(broker_->ack("jobs", {taken[0].receipt}).at(0).outcome, ReceiptOutcome::Done);
}

TEST_F(HolderTest, WaitingReceiversLookAgainOnlyWhileAHolderHoldsALease) {
  EXPECT_EQ(broker_->next_delivery("jobs", false), INT64_MAX);
  send("a");
  auto m = receive(worker_);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(broker_->next_delivery("jobs", false), clock_.now() + kHolderCheckEvery)
      << "a living holder: look again at the next check, not at the 5 min timeout";
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  EXPECT_LE(broker_->next_delivery("jobs", false), clock_.now()) << "a dead holder: now";
  dead_.clear();
  broker_->ack("jobs", {m[0].receipt});
  EXPECT_EQ(broker_->next_delivery("jobs", false), INT64_MAX)
      << "no lease held: no periodic wake-ups";
  clock_.advance(kHolderCheckEvery);
  send("b");  // the check forgets the holder without leases
  clock_.advance(kHolderCheckEvery);
  send("c");
  EXPECT_EQ(broker_->next_delivery("jobs", false), INT64_MIN);
}

TEST_F(HolderTest, ReceiveWithWaitReleasesADeadHoldersMessage) {
  send("a");
  ASSERT_EQ(receive(worker_).size(), 1u);
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  ReceiveOptions options;
  options.wait = 10 * kSecond;
  auto got = broker_->receive("jobs", options);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].reason, kHolderDied);
}

TEST_F(HolderTest, FifoGroupMovesOnWhenItsHolderDies) {
  ConfigChange fifo;
  fifo.fifo = true;
  fifo.visibility_timeout = 5 * kMinute;
  broker_->create_queue("orders", fifo);
  send("first", "orders", "g");
  send("second", "orders", "g");
  ASSERT_EQ(receive(worker_, "orders").size(), 1u);
  EXPECT_TRUE(receive(std::nullopt, "orders").empty()) << "the group is held";
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  auto again = receive(std::nullopt, "orders");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].body, "first") << "the released message is its group's next";
}

TEST_F(HolderTest, DeletingTheQueueForgetsItsHolders) {
  send("a");
  ASSERT_EQ(receive(worker_).size(), 1u);
  broker_->delete_queue("jobs");
  // TearDown's verify finds no entry of a queue that is gone.
}

TEST_F(HolderTest, FileWithoutTheHoldersDatabaseGetsItOnFirstWrite) {
  send("a");
  broker_.reset();
  poke(path_, "holders", [](MDB_txn* txn, MDB_dbi dbi) { ASSERT_EQ(mdb_drop(txn, dbi, 1), 0); });
  broker_ = open();
  EXPECT_EQ(broker_->verify(), std::vector<std::string>{});
  EXPECT_EQ(broker_->next_delivery("jobs", false), INT64_MIN);
  ASSERT_EQ(receive(worker_).size(), 1u);
  dead_.insert(worker_.pid);
  clock_.advance(kHolderCheckEvery);
  EXPECT_EQ(receive().size(), 1u);
}

TEST_F(HolderTest, VerifyFindsAListedLeaseWithoutItsHolderEntry) {
  send("a");
  auto m = receive(worker_);
  ASSERT_EQ(m.size(), 1u);
  broker_.reset();
  poke(path_, "holders", [](MDB_txn* txn, MDB_dbi dbi) {
    auto key = store::key_lease_holder(1, 1);
    MDB_val k{key.size(), key.data()};
    ASSERT_EQ(mdb_del(txn, dbi, &k, nullptr), 0);
  });
  broker_ = open();
  auto problems = broker_->verify();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("listed under holder 4242 but not held by it"), std::string::npos)
      << problems[0];
  broker_.reset();
}

// The real probe, on child processes.
TEST(HolderLiveness, TellsALivingProcessFromAReusedPidAZombieAndAReapedOne) {
  auto self = find_holder(static_cast<std::uint32_t>(getpid()));
  ASSERT_TRUE(self);
  EXPECT_TRUE(holder_alive(*self));
  Holder reused = *self;
  reused.start_time += 1;
  EXPECT_FALSE(holder_alive(reused)) << "same pid, another start time: another process";

  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  auto held = find_holder(static_cast<std::uint32_t>(child));
  ASSERT_TRUE(held);
  EXPECT_TRUE(holder_alive(*held));
  kill(child, SIGSTOP);
  waitpid(child, nullptr, WUNTRACED);
  EXPECT_TRUE(holder_alive(*held)) << "a stopped process lives";
  kill(child, SIGKILL);
  // Dead but not reaped yet: a zombie holds nothing.
  for (int i = 0; i < 1000 && holder_alive(*held); ++i) usleep(1000);
  EXPECT_FALSE(holder_alive(*held));
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(holder_alive(*held));
  EXPECT_FALSE(find_holder(static_cast<std::uint32_t>(child)));
}

// Two containers of one image: pid 42 in both, started in one clock tick
// (issue 25 item 10). Their holders must differ, or A's death releases B's
// leases: the start time carries the pid namespace.
TEST(HolderLiveness, OnePidAndStartTickInTwoPidNamespacesAreTwoHolders) {
  auto self = find_holder(static_cast<std::uint32_t>(getpid()));
  ASSERT_TRUE(self);
  if (self->pid_namespace == 0) GTEST_SKIP() << "no /proc/self/ns/pid here";
  EXPECT_EQ(self->start_time >> 40, self->pid_namespace & 0xffffff);
  EXPECT_TRUE(holder_alive(*self)) << "the tag is not part of the process's start time";
  Holder reused = *self;
  reused.start_time += 1;
  EXPECT_FALSE(holder_alive(reused)) << "another start tick under the tag: another process";
}

TEST(HolderLiveness, AnotherPidNamespaceCannotBeJudgedAndCountsAsAlive) {
  auto self = find_holder(static_cast<std::uint32_t>(getpid()));
  ASSERT_TRUE(self);
  if (self->pid_namespace == 0) GTEST_SKIP() << "no /proc/self/ns/pid here";
  Holder elsewhere{4194305, 1, self->pid_namespace + 1};
  EXPECT_TRUE(holder_alive(elsewhere));
  Holder here{4194305, 1, self->pid_namespace};
  EXPECT_FALSE(holder_alive(here)) << "a pid beyond PID_MAX_LIMIT";
}

}  // namespace
