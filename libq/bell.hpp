// A doorbell for waiting receivers: a counter in a small shared file next to
// the queue file (FILE-wake), bumped by every writer after its commit is
// visible, with a futex wake. Waiting on it costs nothing to set up or tear
// down, unlike inotify, whose teardown waits for an RCU grace period (several
// milliseconds on every exit of a one-shot `q receive --wait`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "clock.hpp"

namespace q::store {

class Bell {
 public:
  // nullptr when the file cannot be opened or mapped (no permission, say);
  // callers fall back to watching the queue file.
  static std::unique_ptr<Bell> open(const std::string& queue_file);
  ~Bell();
  Bell(const Bell&) = delete;
  Bell& operator=(const Bell&) = delete;

  std::uint32_t rings() const;
  void ring();
  // Returns when rings() differs from `seen`, or after `ms`.
  void wait(std::uint32_t seen, Millis ms) const;

 private:
  Bell(int fd, void* page) : fd_(fd), page_(page) {}
  int fd_;
  void* page_;
};

}  // namespace q::store
