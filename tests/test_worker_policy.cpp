// q work's outcome policy (cli/work/worker_policy.cpp) on a FakeClock: what an
// ended command means for its message, and that expected outcomes (a stale
// receipt) come back as values.
#include <gtest/gtest.h>

#include <signal.h>

#include <cerrno>

#include "libq/lmdb/broker.hpp"
#include "support.hpp"
#include "cli/work/worker_policy.hpp"

using namespace cli::work;
using q::kSecond;

namespace {

int exited(int code) { return (code & 0xff) << 8; }  // a wait status, as waitpid gives it
int killed(int signo) { return signo & 0x7f; }
// An ending with the fields a test names (the rest as a clean exit leaves them).
Ending ending(int status, bool timed_out = false, bool stopped = false, int exec_errno = 0,
              std::string stderr_tail = "") {
  Ending e;
  e.status = status;
  e.timed_out = timed_out;
  e.stopped = stopped;
  e.exec_errno = exec_errno;
  e.stderr_tail = std::move(stderr_tail);
  return e;
}

class WorkerPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    q::LmdbOptions options;
    options.open.path = tmp_.file("policy.q");
    options.open.create = true;
    options.clock = &clock_;
    // Distinct nonces, all tiny: the backoff is its least delay.
    options.random = [n = std::uint64_t{0}]() mutable { return ++n; };
    broker_ = q::open_lmdb_broker(options);
    q::ConfigChange config;
    config.visibility_timeout = 30 * kSecond;
    broker_->create_queue("jobs", config);
    PolicyOptions p;
    p.queue = "jobs";
    p.program = "/bin/handler";
    p.backoff_base = 10 * kSecond;
    p.backoff_cap = 60 * kSecond;
    p.grace = 5 * kSecond;
    p.timeout = 2 * kSecond;
    p.idempotency_window = q::kHour;
    policy_.emplace(*broker_, clock_, p);
  }
  q::Message take(const std::string& body = "m") {
    broker_->send("jobs", {{body, {}, ""}}, {});
    return receive().at(0);
  }
  std::vector<q::Message> receive() { return broker_->receive("jobs", {}); }

  q::testing::TempDir tmp_;
  q::FakeClock clock_;
  std::unique_ptr<q::Broker> broker_;
  std::optional<OutcomePolicy> policy_;
};

TEST_F(WorkerPolicyTest, JudgesEachWayACommandEnds) {
  const auto& o = policy_->options();
  auto verdict = [&](Ending e) { return judge(e, o); };
  EXPECT_EQ(verdict(ending(exited(0))).verdict, Verdict::Ack);
  EXPECT_EQ(verdict(ending(exited(65))).verdict, Verdict::DeadLetter);
  EXPECT_EQ(verdict(ending(exited(65))).what, "exit status 65");
  EXPECT_EQ(verdict(ending(exited(3))).verdict, Verdict::Retry);
  EXPECT_EQ(verdict(ending(killed(SIGKILL))).what, "killed by SIGKILL");
  EXPECT_EQ(verdict(ending(killed(SIGKILL))).verdict, Verdict::Retry);
  Ending timed_out = ending(killed(SIGTERM), true);
  EXPECT_EQ(verdict(timed_out).verdict, Verdict::Retry);
  EXPECT_EQ(verdict(timed_out).what, "timed out after 2s");
  // Exit 0 after the timeout's SIGTERM is still a failure: it did not finish in time.
  EXPECT_EQ(verdict(ending(exited(0), true)).verdict, Verdict::Retry);
  Ending stopped = ending(exited(0), false, true);
  EXPECT_EQ(verdict(stopped).verdict, Verdict::ReleaseAtStop);
  EXPECT_EQ(verdict(stopped).what, "q work stopped after 5s grace");
  Ending missing = ending(exited(127), false, false, ENOENT);
  EXPECT_EQ(verdict(missing).verdict, Verdict::Retry);
  EXPECT_EQ(verdict(missing).what, "cannot run /bin/handler: No such file or directory");
  // The reason keeps the last three lines of stderr.
  Ending noisy = ending(exited(1), false, false, 0, "one\ntwo\n\nthree\nfour\n");
  EXPECT_EQ(verdict(noisy).reason, "exit status 1: two\nthree\nfour");
}

TEST_F(WorkerPolicyTest, PlainAcksOnlyForExitZeroWithoutAKey) {
  EXPECT_TRUE(policy_->plain_ack(ending(exited(0)), ""));
  EXPECT_FALSE(policy_->plain_ack(ending(exited(0)), "key"));
  EXPECT_FALSE(policy_->plain_ack(ending(exited(1)), ""));
  EXPECT_FALSE(policy_->plain_ack(ending(exited(0), true), ""));
}

TEST_F(WorkerPolicyTest, AFailureIsReleasedWithBackoffOnTheClock) {
  auto m = take();
  auto settled = policy_->settle(m, "", ending(exited(3), false, false, 0, "boom\n"));
  EXPECT_EQ(settled.tally, Tally::Failed);
  EXPECT_EQ(settled.note, "message " + m.id + ": failed (exit status 3), retry in 0s");
  auto again = receive();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].receive_count, 2u);
  EXPECT_EQ(again[0].reason, "exit status 3: boom");
}

TEST_F(WorkerPolicyTest, TheRetryNoteCountsFromTheClock) {
  q::LmdbOptions options;
  options.open.path = tmp_.file("policy.q");
  options.clock = &clock_;
  // Distinct nonces, all huge: the backoff is its most delay.
  options.random = [n = std::uint64_t{0}]() mutable { return ~std::uint64_t{0} - ++n; };
  broker_ = q::open_lmdb_broker(options);
  policy_.emplace(*broker_, clock_, policy_->options());
  auto m = take();
  auto settled = policy_->settle(m, "", ending(exited(1)));
  EXPECT_EQ(settled.note, "message " + m.id + ": failed (exit status 1), retry in 9999ms");
  clock_.advance(9 * kSecond);
  EXPECT_TRUE(receive().empty());
  clock_.advance(1 * kSecond);
  EXPECT_EQ(receive().size(), 1u);
}

TEST_F(WorkerPolicyTest, Exit65DeadLettersAtOnce) {
  auto m = take();
  auto settled = policy_->settle(m, "", ending(exited(65), false, false, 0, "bad input\n"));
  EXPECT_EQ(settled.tally, Tally::DeadLettered);
  EXPECT_EQ(settled.note, "message " + m.id + ": dead-lettered (exit status 65)");
  auto dead = broker_->dead_letters("jobs", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].reason, "exit status 65: bad input");
}

// A failed run at the last receive the queue allows is dead-lettered by the
// nack's own transaction: it is not left visible at its receive limit for a
// later receive to dead-letter, and the note and tally say what happened.
TEST_F(WorkerPolicyTest, AFailureAtTheLastAllowedReceiveIsDeadLetteredThere) {
  q::ConfigChange two;
  two.max_receives = 2;
  broker_->configure("jobs", two);
  auto m = take();
  EXPECT_EQ(policy_->settle(m, "", ending(exited(1))).tally, Tally::Failed);
  auto last = receive().at(0);
  ASSERT_EQ(last.receive_count, 2u);
  auto settled = policy_->settle(last, "", ending(exited(1), false, false, 0, "still down\n"));
  EXPECT_EQ(settled.tally, Tally::DeadLettered);
  EXPECT_EQ(settled.note, "message " + m.id +
                              ": failed (exit status 1), dead-lettered: receive 2 was the last "
                              "allowed");
  auto stats = broker_->stats("jobs").at(0);
  EXPECT_EQ(stats.counters.nacked, 1u);
  EXPECT_EQ(stats.counters.dead_lettered, 1u);
  EXPECT_EQ(stats.dead, 1u);
  auto dead = broker_->dead_letters("jobs", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].reason, "exit status 1: still down");
  clock_.advance(q::kHour);
  EXPECT_TRUE(receive().empty());
}

TEST_F(WorkerPolicyTest, AStaleReceiptIsAnOutcomeNotAnException) {
  auto m = take();
  clock_.advance(31 * kSecond);  // the lease ran out; another consumer took it
  ASSERT_EQ(receive().size(), 1u);
  Settled settled;
  ASSERT_NO_THROW(settled = policy_->settle(m, "", ending(exited(1))));
  EXPECT_EQ(settled.tally, Tally::Failed);
  EXPECT_NE(settled.note.find("exit status 1"), std::string::npos) << settled.note;
  // Released at a stop with a stale receipt: it is back all the same, nothing counted.
  EXPECT_EQ(policy_->settle(m, "", ending(exited(0), false, true)).tally, Tally::None);
  // Done but stale: counted as done, with a note.
  settled = policy_->settle(m, "", ending(exited(0)));
  EXPECT_EQ(settled.tally, Tally::Done);
  EXPECT_EQ(settled.note, lease_lost_note(m.receipt));
  q::ReceiveOptions none;
  none.max_messages = 0;
  auto round = policy_->ack_and_take({m.receipt}, none);
  EXPECT_EQ(round.notes, std::vector<std::string>{lease_lost_note(m.receipt)});
}

TEST_F(WorkerPolicyTest, HeartbeatExtendsOrReportsALostLease) {
  auto m = take();
  clock_.advance(20 * kSecond);
  EXPECT_EQ(policy_->heartbeat(m.receipt, 30 * kSecond).outcome, q::ReceiptOutcome::Done);
  clock_.advance(20 * kSecond);  // past the first lease, within the extended one
  EXPECT_TRUE(receive().empty());
  clock_.advance(11 * kSecond);
  ASSERT_EQ(receive().size(), 1u);
  q::ReceiptResult beat;
  ASSERT_NO_THROW(beat = policy_->heartbeat(m.receipt, 30 * kSecond));
  EXPECT_EQ(beat.outcome, q::ReceiptOutcome::Stale);
  EXPECT_FALSE(beat.detail.empty());
  EXPECT_EQ(policy_->heartbeat("not a receipt", kSecond).outcome, q::ReceiptOutcome::Malformed);
}

TEST_F(WorkerPolicyTest, AnIdempotencyKeyIsRememberedForTheWindow) {
  auto m = take();
  EXPECT_EQ(policy_->settle(m, "order-7", ending(exited(0))).tally, Tally::Done);
  EXPECT_TRUE(broker_->is_done("jobs", "order-7"));
  clock_.advance(q::kHour + 1);
  EXPECT_FALSE(broker_->is_done("jobs", "order-7"));
}

TEST_F(WorkerPolicyTest, PlainAcksAndTheNextMessagesShareOneRound) {
  auto a = take("a"), b = take("b");
  broker_->send("jobs", {{"c", {}, ""}}, {});
  q::ReceiveOptions next;
  next.max_messages = 2;
  auto round = policy_->ack_and_take({a.receipt, b.receipt}, next);
  EXPECT_TRUE(round.notes.empty());
  ASSERT_EQ(round.taken.size(), 1u);
  EXPECT_EQ(round.taken[0].body, "c");
  EXPECT_EQ(broker_->stats("jobs").at(0).counters.acked, 2u);
}

}  // namespace
