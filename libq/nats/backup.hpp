// q backup on a nats:// location: the namespace's queues written to a q queue
// file (the LMDB backend), which `q -f FILE` reads and serves like any queue
// file and from which `q export | q import` puts queues back on a cluster.
// Each queue is read on its own (export's reads: no consumer, nothing
// delivered); there is no one instant across queues on JetStream, so the
// copy of each queue is of the moment it was read. In-flight messages arrive
// visible, as a q import stores them (a lease does not move between places).
// ARCHITECTURE.md, "Distributed backend", Export, import, backup.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace q::nats {

struct BackupQueue {
  QueueConfig config;
  std::optional<Pause> pause;
  std::vector<Message> messages;  // live then dead, as export gives them
};

// Writes the queues `queues` (each read by `read`, nullopt: gone meanwhile)
// to a new queue file at `path`, replacing what is there atomically (built
// under a temporary name in the same directory, then renamed).
void backup_to_file(const std::string& path, const Clock& clock,
                    const std::vector<std::string>& queues,
                    const std::function<std::optional<BackupQueue>(const std::string&)>& read);

}  // namespace q::nats
