// A file that batch work left behind must open in a new process. LMDB's meta
// page may name a last page past the end of a healthy file (pages allocated
// and freed inside one transaction are never written); a check that took that
// for truncation made every new process refuse the file after an ordinary
// purge, drain or delete (issue 17, break 1). Each case here does the batch
// operation, closes the environment and opens the file again, as a new
// process would.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "libq/error.hpp"
#include "libq/lmdb/broker.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace q;

namespace {

// 1 to 64 one by one, then growing by a quarter, up to 20,000: every size
// class of B-tree shape (one leaf, a branch, several levels) is crossed.
std::vector<std::uint32_t> batch_sizes() {
  std::vector<std::uint32_t> sizes;
  for (std::uint32_t n = 1; n <= 64; ++n) sizes.push_back(n);
  for (std::uint32_t n = 80; n < 20000; n += n / 4) sizes.push_back(n);
  sizes.push_back(20000);
  return sizes;
}

class ReopenTest : public ::testing::Test {
 protected:
  std::unique_ptr<Broker> open(bool create) {
    LmdbOptions options;
    options.open.path = path_;
    options.open.create = create;
    options.open.durable = false;
    options.clock = &clock_;
    options.random = [] { return 42u; };
    return open_lmdb_broker(options);
  }

  void fill(Broker& broker, std::uint32_t n, const std::string& body) {
    std::vector<OutgoingMessage> batch(n, OutgoingMessage{body, {}, ""});
    broker.send("w", std::move(batch), {});
  }

  // Runs `work` on a new file with queue w, then opens the file as a new
  // process would and checks it is whole and says what `expect` says.
  void check_reopens(std::uint32_t n, const std::function<void(Broker&)>& work,
                     const std::function<void(const QueueStats*)>& expect) {
    fs::remove(path_);
    fs::remove(path_ + "-lock");
    {
      auto broker = open(true);
      ConfigChange change;
      change.max_receives = 1;
      broker->create_queue("w", change);
      work(*broker);
    }
    std::unique_ptr<Broker> again;
    try {
      again = open(false);
    } catch (const Error& e) {
      FAIL() << "batch of " << n << ": a fresh open refused the file: " << e.what();
    }
    EXPECT_EQ(again->verify(), std::vector<std::string>{}) << "batch of " << n;
    auto stats = again->stats("");
    expect(stats.empty() ? nullptr : &stats.front());
  }

  q::testing::TempDir tmp_;
  std::string path_ = tmp_.file("batch.q");
  FakeClock clock_;
};

TEST_F(ReopenTest, AfterPurgeOfEverySize) {
  for (auto n : batch_sizes()) {
    check_reopens(
        n,
        [&](Broker& broker) {
          fill(broker, n, std::string(40, 'p'));
          EXPECT_EQ(broker.purge("w"), n);
        },
        [&](const QueueStats* s) {
          ASSERT_NE(s, nullptr);
          EXPECT_EQ(s->visible, 0u) << n;
        });
    if (HasFailure()) return;
  }
}

TEST_F(ReopenTest, AfterReceiveAndAckOfEverySize) {
  for (auto n : batch_sizes()) {
    check_reopens(
        n,
        [&](Broker& broker) {
          fill(broker, n, "x");
          ReceiveOptions options;
          options.max_messages = n;
          std::vector<std::string> receipts;
          // receive -n stops at its own batch limit; take until none is left.
          while (receipts.size() < n) {
            auto got = broker.receive("w", options);
            ASSERT_FALSE(got.empty());
            for (auto& m : got) receipts.push_back(m.receipt);
          }
          for (const auto& r : broker.ack("w", receipts))
            ASSERT_EQ(r.outcome, ReceiptOutcome::Done);
        },
        [&](const QueueStats* s) {
          ASSERT_NE(s, nullptr);
          EXPECT_EQ(s->visible + s->in_flight, 0u) << n;
          EXPECT_EQ(s->counters.acked, n);
        });
    if (HasFailure()) return;
  }
}

TEST_F(ReopenTest, AfterDeleteOfLiveAndDeadOfEverySize) {
  for (auto n : batch_sizes()) {
    check_reopens(
        n,
        [&](Broker& broker) {
          fill(broker, 2 * n, std::string(100, 'd'));
          // Half become dead letters: received once (max receives 1) with
          // no visibility timeout, then moved by the next write.
          ReceiveOptions options;
          options.max_messages = n;
          options.visibility_timeout = 0;
          std::uint32_t taken = 0;
          while (taken < n) {
            options.max_messages = n - taken;
            auto got = broker.receive("w", options);
            ASSERT_FALSE(got.empty());
            taken += static_cast<std::uint32_t>(got.size());
          }
          clock_.advance(1);
          auto removed = broker.delete_queue("w");
          EXPECT_EQ(removed.messages + removed.dead_letters, 2u * n);
        },
        [&](const QueueStats* s) { EXPECT_EQ(s, nullptr) << n; });
    if (HasFailure()) return;
  }
}

}  // namespace
