#include "libq/nats/backup.hpp"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "libq/files.hpp"
#include "libq/backends.hpp"
#include "libq/error.hpp"

namespace q::nats {

void backup_to_file(const std::string& path, const Clock& clock,
                    const std::vector<std::string>& queues,
                    const std::function<std::optional<BackupQueue>(const std::string&)>& read) {
  // Built in a directory of its own beside the target (the file's lock and
  // doorbell files stay there), then renamed over the target.
  std::string dir_template = files::parent_dir(path) + "/.q-backup-XXXXXX";
  if (!mkdtemp(dir_template.data()))
    throw Error(ErrorKind::Io, fmt::format("{}: cannot make a temporary directory beside it: {}",
                                           path, std::strerror(errno)));
  const std::string dir = dir_template;
  const std::string file = dir + "/backup.q";
  auto clean = [&] {
    for (const char* suffix : {"", "-lock", "-wake", ".creating"})
      ::unlink((file + suffix).c_str());
    ::rmdir(dir.c_str());
  };
  try {
    {
      BrokerRequest request;
      request.location = file;
      request.create = true;
      request.clock = &clock;
      auto out = open_broker(request);
      for (const auto& queue : queues) {
        auto b = read(queue);
        if (!b) continue;
        const QueueConfig& c = b->config;
        ConfigChange change;
        change.visibility_timeout = c.visibility_timeout;
        change.max_receives = c.max_receives;
        change.retention = c.retention;
        change.delay = c.delay;
        change.max_depth = c.max_depth;
        change.max_size = c.max_size;
        change.dedup_window = c.dedup_window;
        change.rate = c.rate;
        change.fifo = c.fifo;
        change.content_dedup = c.content_dedup;
        out->create_queue(queue, change);
        out->import_messages(queue, std::move(b->messages), false);
        if (b->pause) out->pause(queue, b->pause->until, b->pause->reason);
      }
    }
    if (::rename(file.c_str(), path.c_str()) != 0)
      throw Error(ErrorKind::Io,
                  fmt::format("{}: cannot put the backup there: {}", path, std::strerror(errno)));
  } catch (...) {
    clean();
    throw;
  }
  clean();
}

}  // namespace q::nats
