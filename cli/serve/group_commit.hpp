// Group commit for q serve: the requests that arrive while another request's
// commit is being synced go into the next commit together.
//
// No thread of its own: each request puts its item in the pending list and
// takes the broker's mutex. Whoever gets the mutex first commits every item
// pending at that moment (its own among them) in as few broker calls as the
// items allow (one per queue, say), marks each done and lets go; a request
// whose item was committed by another only reads its result. A reply is
// therefore sent only after the commit that holds its request returned, as
// durable as that commit (the broker's sync, unless --no-sync), and a lone
// request pays nothing more than before: it commits alone at once.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <type_traits>
#include <vector>

namespace serve {

// Item: has `bool done` and `std::exception_ptr error`, set by the committer.
template <class Item>
class GroupCommit {
 public:
  // commit(items): called with `broker_mutex` held, with every pending item
  // not yet done, the caller's own among them. It sets each item's result;
  // an item it leaves without one gets the exception it threw.
  template <class Commit>
  void submit(Item& item, std::mutex& broker_mutex, Commit commit) {
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      pending_.push_back(&item);
    }
    std::lock_guard<std::mutex> lock(broker_mutex);
    if (!item.done) {
      std::vector<Item*> batch;
      {
        std::lock_guard<std::mutex> pending_lock(pending_mutex_);
        batch.swap(pending_);
      }
      items_ += batch.size();
      try {
        commit(batch);
      } catch (...) {
        for (Item* i : batch)
          if (!i->done) i->error = std::current_exception(), i->done = true;
      }
      for (Item* i : batch) i->done = true;
    }
    if (item.error) std::rethrow_exception(item.error);
  }

  // --no-group-commit: this item alone, as soon as the mutex is free.
  template <class Commit>
  void submit_alone(Item& item, std::mutex& broker_mutex, Commit commit) {
    std::lock_guard<std::mutex> lock(broker_mutex);
    ++items_;
    try {
      commit(std::vector<Item*>{&item});
    } catch (...) {
      if (!item.error) item.error = std::current_exception();
    }
    if (item.error) std::rethrow_exception(item.error);
  }

  // Items waiting for a commit now.
  std::size_t pending() {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    return pending_.size();
  }

  // Read with the broker mutex held: the items submitted so far.
  std::uint64_t items() const { return items_; }

 private:
  std::mutex pending_mutex_;
  std::vector<Item*> pending_;
  std::uint64_t items_ = 0;
};

// Commits each group of items with one call of `commit_group(items)`. When a
// call is refused in a way that stored nothing (`alone_may_pass(error)`: a
// rule's refusal, checked before anything is written, on every backend), its
// items are committed one by one, so that each gets its own answer. Any other
// failure (I/O, a cluster that went away part-way) may have stored part of the
// group: trying again could store a message twice, so every item of the group
// gets that error, as one batch request would. Groups: a map of containers of
// Item*; Error: what a failed commit throws.
template <class Error, class Groups, class CommitGroup, class AlonePass>
void commit_each_group(Groups& groups, CommitGroup commit_group, AlonePass alone_may_pass) {
  auto fail = [](auto* item) {
    if (item->done) return;
    item->error = std::current_exception();
    item->done = true;
  };
  for (auto& [key, items] : groups) {
    try {
      commit_group(items);
      continue;
    } catch (const Error& e) {
      if (items.size() == 1 || !alone_may_pass(e)) {
        for (auto* item : items) fail(item);
        continue;
      }
    }
    for (auto* item : items) {
      try {
        commit_group(std::vector<std::decay_t<decltype(item)>>{item});
      } catch (const Error&) {
        fail(item);
      }
    }
  }
}

}  // namespace serve
