// The one error type of libq: a kind (which the CLI maps to an exit code) and a
// message that already names the file, queue, receipt or setting involved.
// Settings and request fields are named as in the C++ structs
// (`visibility_timeout`, `max_receives`): a front end that calls them
// otherwise (the CLI's --visibility-timeout) renames field() in the message.
#pragma once

#include <stdexcept>
#include <string>

namespace q {

enum class ErrorKind {
  Usage,        // a request that makes no sense (bad name, out-of-range setting)
  InvalidData,  // too large, malformed receipt or attribute
  NotFound,     // no such queue file, queue or message
  Stale,        // receipt of a delivery that is no longer current
  Full,         // queue at max depth: nothing written, try later
  Busy,         // writer lock not granted within the bounded wait
  Io,           // I/O error, disk full, corrupt or incompatible file
  Permission,   // permission denied
  ReadOnly,     // the file is on a read-only file system: it can be read, not written
};

// What the caller can do about an error, for a front end to phrase in its own
// terms (the CLI names its commands).
enum class Remedy {
  None,
  CreateQueue,   // queue(): no such queue; create it
  CreateFile,    // no queue file; creating a queue makes one
  ChangeConfig,  // queue() exists with other settings; change field() to wanted()
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

  // The setting or request field the message names (as a whole word), if any.
  const std::string& field() const noexcept { return field_; }
  Error& with_field(std::string field) {
    field_ = std::move(field);
    return *this;
  }

  Remedy remedy() const noexcept { return remedy_; }
  const std::string& queue() const noexcept { return queue_; }
  const std::string& wanted() const noexcept {
    return wanted_;
  }  // ChangeConfig: the value asked for
  Error& with_remedy(Remedy remedy, std::string queue = {}, std::string wanted = {}) {
    remedy_ = remedy;
    queue_ = std::move(queue);
    wanted_ = std::move(wanted);
    return *this;
  }

  // About the request (a queue full, a message too large, a queue gone), not
  // about the writer lock or the store (Busy, Io): a batch can leave this one
  // part undone and go on with the rest.
  bool refuses_the_request() const noexcept {
    return kind_ != ErrorKind::Busy && kind_ != ErrorKind::Io;
  }

 private:
  ErrorKind kind_;
  std::string field_;
  Remedy remedy_ = Remedy::None;
  std::string queue_;
  std::string wanted_;
};

}  // namespace q
