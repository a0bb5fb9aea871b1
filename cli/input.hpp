// Parsing what users type: durations, times, attributes, and reading stdin.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace cli {

// Throw q::Error(Usage) naming `flag` when `text` is malformed.
q::Millis duration_flag(const std::string& flag, const std::string& text);
// "YYYY-MM-DD HH:MM[:SS]" (or with a T) without a zone: local time (TZ).
std::optional<q::Millis> parse_local_time(const std::string& text);
// RFC 3339 (q::parse_time), @UNIX, or a local time as above.
q::Millis time_flag(const std::string& flag, const std::string& text);
// For optional flags: nullopt when the flag was not given; an empty value given
// is malformed like any other.
std::optional<q::Millis> duration_flag(const std::string& flag,
                                       const std::optional<std::string>& text);

// "50/s", "3000/m", "10/h", or a bare number per second; in messages per second.
double rate_flag(const std::string& flag, const std::string& text);

// A count of digits only, at most `max`: CLI11 reads "-1" into an unsigned
// 64-bit option as 2^64-1 (issue 12 break 13).
std::uint64_t count_flag(const std::string& flag, const std::string& text, std::uint64_t max);

// KEY=VALUE; throws q::Error(InvalidData) naming the flag when malformed.
// A size in bytes: "1048576", "512K", "10M", "1MiB", "10MB", "1.5K": K, M,
// G and KiB, MiB, GiB are powers of 1024, KB, MB, GB of 1000 (GNU's rule);
// nullopt when malformed or not whole bytes.
std::optional<std::uint64_t> parse_size(const std::string& text);
// parse_size, or q::Error(Usage) naming the flag and the forms; over `max` too.
std::uint64_t size_flag(const std::string& flag, const std::string& text, std::uint64_t max);
std::pair<std::string, std::string> attribute_flag(const std::string& text,
                                                   const std::string& flag = "--attr");

// Reads all of standard input, binary-safe. Throws q::Error(Io) on failure.
std::string read_stdin();

// The longest record RecordReader takes: the largest max size a queue can have.
constexpr std::size_t kMaxRecord = q::kMaxMaxSize;

// Reads records ending in `separator` from a descriptor as they arrive, for a
// group commit: each batch is what is readable now (bounded), so a trickle
// gives one record a batch and a fast stream large ones. Memory: one batch.
class RecordReader {
 public:
  RecordReader(int fd, char separator, std::size_t max_records, std::size_t max_bytes);
  // Waits (poll, without a time limit) until input is readable, then returns
  // the complete records readable now, at most max_records and about
  // max_bytes. While the input keeps a fast producer's pace (a full read
  // buffer), it waits a millisecond more for the rest. Empty: end of input.
  // A final unterminated record counts. Throws q::Error(Io) on a read error,
  // q::Error(InvalidData) for a record over `max_record` bytes.
  std::vector<std::string> next_batch();
  // Records returned so far.
  std::uint64_t records() const { return records_; }
  // A record over `bytes` is refused as soon as that much of it is read
  // (not buffered to kMaxRecord first), named as `what` (issue 25 item 15).
  void limit_records(std::size_t bytes, std::string what) {
    max_record_ = bytes;
    limit_what_ = std::move(what);
  }

 private:
  bool fill(int timeout_ms);  // false: nothing readable within the time

  int fd_;
  char separator_;
  std::size_t max_records_, max_bytes_;
  std::string buffer_;       // read, not yet returned
  std::size_t start_ = 0;    // of the first record not yet returned
  std::size_t scanned_ = 0;  // bytes after start_ known to hold no separator
  bool eof_ = false;
  std::uint64_t records_ = 0;
  std::size_t max_record_;
  std::string limit_what_;
};

// Splits on `separator`; a final unterminated record counts, a final separator
// does not start an empty one.
std::vector<std::string> split_records(const std::string& data, char separator);

}  // namespace cli
