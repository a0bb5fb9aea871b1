// Internal to libq: the inotify fallback that wakes a long-polling receiver.
#pragma once

#include <string>

#include "libq/broker.hpp"

namespace q {

// Wakes a long-polling receiver when any process has committed to the file:
// every q writer touches the file's times once its commit is visible to
// readers (Env::announce_commit), and inotify sees that from every process.
class FileWatch final : public ChangeWatch {
 public:
  explicit FileWatch(const std::string& path);
  ~FileWatch();
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;

  int fd() const override { return fd_; }
  void drain() override;

  // Waits until the file changes or `ms` pass.
  void wait(Millis ms);

 private:
  int fd_ = -1;
};

}  // namespace q
