// The LMDB backend of the Broker interface: every queue of a file in one LMDB
// environment. Storage layout: see ARCHITECTURE.md.
#pragma once

#include <functional>
#include <memory>

#include "libq/broker.hpp"
#include "libq/holder.hpp"
#include "libq/lmdb/store.hpp"

namespace q {

struct LmdbOptions {
  store::OpenOptions open;
  const Clock* clock = nullptr;           // default: the system clock
  std::function<std::uint64_t()> random;  // default: seeded from the OS
  HolderProbe holder_alive;               // default: q::holder_alive (holder.hpp)
};

std::unique_ptr<Broker> open_lmdb_broker(const LmdbOptions& options);

}  // namespace q
