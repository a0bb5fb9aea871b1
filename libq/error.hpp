// The one error type of libq: a kind (which the CLI maps to an exit code) and a
// message that already names the file, queue, receipt or flag involved.
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
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace q
