// GroupCommit (cli/serve/group_commit.hpp): items submitted while the broker
// mutex is held are committed together by whoever takes it next, each gets
// its own result or error, and submit returns only once its item is done.
#include "cli/serve/group_commit.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <stdexcept>
#include <thread>

namespace {

struct Item {
  int value = 0;
  int result = 0;
  bool done = false;
  std::exception_ptr error;
};

TEST(GroupCommitTest, ItemsThatMeetShareOneCommit) {
  serve::GroupCommit<Item> group;
  std::mutex broker;
  std::vector<std::size_t> calls;  // batch sizes, under `broker`
  auto commit = [&](const std::vector<Item*>& batch) {
    calls.push_back(batch.size());
    for (Item* i : batch) i->result = i->value * 10, i->done = true;
  };
  std::vector<Item> items(4);
  std::vector<std::thread> threads;
  {
    std::unique_lock<std::mutex> held(broker);  // a commit being synced
    for (int k = 0; k < 4; ++k) {
      items[k].value = k + 1;
      threads.emplace_back([&, k] { group.submit(items[k], broker, commit); });
    }
    // All four are pending (they wait for the mutex) before it is let go.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (group.pending() < 4 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(group.pending(), 4u);
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(calls.size(), 1u) << "four items pending at once: one commit";
  EXPECT_EQ(calls[0], 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(items[k].result, (k + 1) * 10);
  EXPECT_EQ(group.items(), 4u);
}

TEST(GroupCommitTest, EachItemGetsItsOwnErrorAndALoneItemCommitsAtOnce) {
  serve::GroupCommit<Item> group;
  std::mutex broker;
  auto commit = [&](const std::vector<Item*>& batch) {
    for (Item* i : batch) {
      if (i->value < 0) {
        i->error = std::make_exception_ptr(std::runtime_error("refused"));
        i->done = true;
      } else {
        i->result = i->value, i->done = true;
      }
    }
  };
  Item good, bad;
  good.value = 7;
  bad.value = -1;
  group.submit(good, broker, commit);
  EXPECT_EQ(good.result, 7);
  EXPECT_THROW(group.submit(bad, broker, commit), std::runtime_error);
  // A commit that throws as a whole: the item gets that error.
  Item thrown;
  EXPECT_THROW(group.submit(thrown, broker,
                            [](const std::vector<Item*>&) { throw std::logic_error("broken"); }),
               std::logic_error);
  EXPECT_TRUE(thrown.done);
  Item alone;
  alone.value = 3;
  group.submit_alone(alone, broker, commit);
  EXPECT_EQ(alone.result, 3);
  EXPECT_EQ(group.items(), 4u);
}

// A refusal that stored nothing is retried item by item (each its own
// answer); any other failure may have stored part of the group, so every
// item gets it and none is tried again (no message stored twice).
TEST(GroupCommitTest, OnlyARefusalThatStoredNothingIsTriedItemByItem) {
  struct Refused : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  for (bool refusal : {true, false}) {
    std::map<int, std::vector<Item*>> groups;
    Item a, b, c;
    a.value = 1, b.value = -1, c.value = 3;
    groups[0] = {&a, &b, &c};
    std::vector<std::size_t> calls;
    auto commit = [&](const std::vector<Item*>& items) {
      calls.push_back(items.size());
      for (Item* i : items)
        if (i->value < 0) throw Refused(refusal ? "refused" : "io");
      for (Item* i : items) i->result = i->value, i->done = true;
    };
    serve::commit_each_group<Refused>(groups, commit, [&](const Refused&) { return refusal; });
    EXPECT_TRUE(a.done && b.done && c.done);
    if (refusal) {
      EXPECT_EQ(calls, (std::vector<std::size_t>{3, 1, 1, 1}));
      EXPECT_EQ(a.result, 1);
      EXPECT_EQ(c.result, 3);
      EXPECT_FALSE(a.error);
      EXPECT_TRUE(b.error);
    } else {
      EXPECT_EQ(calls, (std::vector<std::size_t>{3}));
      EXPECT_TRUE(a.error && b.error && c.error);
    }
  }
}

}  // namespace
