// Internal to libq: the bookkeeping of one FIFO message group inside a write
// transaction (its record, its messages in send order, its head).
#pragma once

#include <cstdint>
#include <string>

#include "libq/lmdb/records.hpp"

namespace q {

class QueueView;

// Every change to a group goes through a GroupEdit: it takes the group's head
// out of `heads` first (while no delivery of the group is in flight, its head
// is there, keyed by its visible time) and offers the head, maybe a new one,
// again when done. On a standard queue it does nothing.
class GroupEdit {
 public:
  GroupEdit(QueueView& view, std::string group);
  void added(std::uint64_t seq);
  void removed(std::uint64_t seq);
  void took_flight() { ++g_.in_flight; }
  void left_flight() {
    if (g_.in_flight > 0) --g_.in_flight;
  }
  void done();

 private:
  std::string group_key(std::uint64_t seq) const;
  QueueView& v_;
  std::string group_;
  store::GroupRecord g_, was_;
  bool active_ = false;
};

}  // namespace q
