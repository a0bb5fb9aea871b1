// A doorbell for waiting receivers: a counter in a small shared file next to
// the queue file (FILE-wake), bumped by every writer after its commit is
// visible, with a futex wake. Waiting on it costs nothing to set up or tear
// down, unlike inotify, whose teardown waits for an RCU grace period (several
// milliseconds on every exit of a one-shot `q receive --wait`).
//
// A futex cannot be waited on together with anything else, so a waiter also
// looks, every kSlice, for what the bell cannot tell it: the queue file's
// times changed (every writer touches them, also one that cannot write
// FILE-wake), or FILE-wake was deleted or replaced (then it opens the new one,
// which is what new writers ring).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "libq/clock.hpp"

namespace q::store {

class Bell {
 public:
  static constexpr Millis kSlice = 100;

  // nullptr when FILE-wake cannot be opened even for reading (no permission,
  // say): callers fall back to watching the queue file. Throws Error(Io) when
  // FILE-wake is a symbolic link or not a regular file of its own (see
  // files.hpp). `data_fd` is the queue file's descriptor, which must outlive
  // the bell.
  static std::unique_ptr<Bell> open(const std::string& queue_file, int data_fd);
  ~Bell();
  Bell(const Bell&) = delete;
  Bell& operator=(const Bell&) = delete;

  // False when this user may only read FILE-wake: ring() then wakes waiters
  // without counting, which a waiter about to sleep can miss (it sees the
  // queue file's times change within kSlice instead).
  bool writable() const { return writable_; }
  // The doorbell's path, for messages.
  const std::string& path() const { return path_; }

  // The count of rings; also the moment a wait's "nothing changed" counts from.
  std::uint32_t rings() const;
  void ring();
  // Returns when rings() differs from `seen`, when woken, when the queue
  // file's times changed since rings() was read, or after `ms`.
  void wait(std::uint32_t seen, Millis ms) const;

 private:
  Bell(std::string path, int data_fd) : path_(std::move(path)), data_fd_(data_fd) {}
  bool map(int fd, bool writable) const;
  void unmap() const;
  bool gone() const;    // FILE-wake no longer has this inode
  void reopen() const;  // to the FILE-wake writers now ring
  bool file_touched() const;

  std::string path_;
  int data_fd_;
  mutable int fd_ = -1;
  mutable void* page_ = nullptr;
  mutable bool writable_ = false;
  mutable struct timespec seen_ctime_ {};
};

}  // namespace q::store
