// On-disk records and keys of the LMDB backend. Every record carries a CRC-32C of
// its bytes so a damaged record is reported, never returned wrong. Keys are
// big-endian so LMDB's byte order is numeric order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libq/broker.hpp"
#include "libq/ids.hpp"
#include "libq/lmdb/codec.hpp"

namespace q::store {

// The ids and receipts (libq/ids.hpp), as the file's code has always named them.
using q::message_id;
using q::parse_message_id;
using q::parse_receipt;
using q::ParsedReceipt;
using q::receipt;

// The file format this build writes. It reads format 1 too (files made by q
// before dedup, done, group and meta values carried a checksum) and upgrades
// such a file in place on its first write (lmdb/upgrade.cpp).
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kOldestFormat = 1;

// ---- keys -------------------------------------------------------------------
// (queue id, seq): messages, dead letters
// (queue id, time, seq): the ready, delayed, leases, age and dead-expiry indexes
// (queue id, dedup id): dedup; (queue id, time, dedup id): dedup expiry
// (seq): bodies, shared by a message and its dead letter
std::string key_q_seq(std::uint32_t qid, std::uint64_t seq);
std::string key_q_time_seq(std::uint32_t qid, Millis time, std::uint64_t seq);
std::string key_q_bytes(std::uint32_t qid, std::string_view bytes);
std::string key_q_time_bytes(std::uint32_t qid, Millis time, std::string_view bytes);
std::string key_seq(std::uint64_t seq);
std::string key_q(std::uint32_t qid);  // prefix of every key of a queue

std::uint32_t key_qid(std::string_view key);
Millis key_time(std::string_view key);                  // of a (qid, time, ...) key
std::uint64_t key_time_seq(std::string_view key);       // seq of a (qid, time, seq) key
std::uint64_t key_q_seq_seq(std::string_view key);      // seq of a (qid, seq) key
std::string_view key_time_bytes(std::string_view key);  // bytes of (qid, time, bytes)

// ---- records ----------------------------------------------------------------
// The mutable part of a message, rewritten on every delivery; kept apart from
// the body so a receive rewrites a few dozen bytes, not the whole message.
struct Header {
  enum Flags : std::uint8_t {
    kLeased = 1,   // visible_at is a lease expiry: in `leases` (or `ready` once due)
    kDelayed = 2,  // visible_at is a delay end: in `delayed` (or `ready` once due)
  };
  std::uint8_t flags = 0;
  std::uint32_t receive_count = 0;
  Millis sent_at = 0;
  Millis visible_at = 0;
  Millis available_at = 0;       // first became available; orders the age index
  Millis first_received_at = 0;  // 0: never
  Millis last_received_at = 0;
  Millis dead_at = 0;
  std::uint64_t nonce = 0;  // of the current receipt; 0: no valid receipt
  std::string reason;
  std::string group;  // FIFO queues
  // Who holds the current delivery (the attempt history's open attempt):
  // the receiving pid, 0 when none is open, and for q work its start time.
  // A receive writes them into the header it rewrites anyway; whatever ends
  // the delivery clears them and appends the attempt to `attempts`.
  std::uint32_t holder_pid = 0;
  Millis holder_since = 0;
  bool has_history = false;  // an `attempts` record exists for this message
};
// Headers without a holder or history keep header version 1 (what older q
// wrote and reads); the others are version 2.
std::string encode(const Header& header);
// nullopt when the checksum or layout is wrong.
std::optional<Header> decode_header(std::string_view bytes);

struct Body {
  Attributes attributes;
  std::string dedup_id;
  std::string body;
};
std::string encode(const Body& body);
std::optional<Body> decode_body(std::string_view bytes);

struct QueueRecord {
  std::uint32_t qid = 0;
  Millis created_at = 0;
  QueueConfig config;
  QueueCounters counters;
  // Messages per index, as of the last write transaction on the queue; due
  // entries of `delayed` and `leases` are moved to `ready` by the next one.
  std::uint64_t ready = 0;
  std::uint64_t delayed = 0;
  std::uint64_t leased = 0;
  std::uint64_t dead = 0;
  // Shared rate limit (GCRA): the theoretical time, in microseconds, at which
  // the next start would conform.
  std::int64_t rate_tat_us = 0;
  std::uint64_t groups = 0;       // FIFO: groups with messages
  std::uint64_t held_groups = 0;  // FIFO: groups with a delivery in flight
};

// A FIFO message group: how many live messages it has and how many of them are
// in flight (while any is, the group is held).
struct GroupRecord {
  std::uint64_t messages = 0;
  std::uint64_t in_flight = 0;
};
std::string encode(const GroupRecord& record);
// `format`: the file's format (format 1 had no version byte).
std::optional<GroupRecord> decode_group(std::string_view bytes,
                                        std::uint32_t format = kFormatVersion);
// (qid, group length, group, seq): a group's messages in send order.
std::string key_group_prefix(std::uint32_t qid, std::string_view group);
// The attempt history of a message, key (seq) like its body: it follows the
// message through dead-lettering and redrive. At most kMaxAttempts, oldest first.
std::string encode(const std::vector<Attempt>& attempts);
std::optional<std::vector<Attempt>> decode_attempts(std::string_view bytes);

// q work's registry: key (pid u32, start time u64), value its command line.
std::string key_worker(std::uint32_t pid, Millis since);
std::uint32_t key_worker_pid(std::string_view key);
Millis key_worker_since(std::string_view key);
std::string encode_worker(const std::string& command);
std::optional<std::string> decode_worker(std::string_view bytes);

// A queue's pause: key (qid) in `pauses`.
std::string encode(const Pause& pause);
std::optional<Pause> decode_pause(std::string_view bytes);

std::string encode(const QueueRecord& record);
std::optional<QueueRecord> decode_queue(std::string_view bytes);

// A dedup id seen: the message it was sent as, and when it is forgotten.
struct DedupRecord {
  std::uint64_t seq = 0;
  Millis expires = 0;
};
std::string encode(const DedupRecord& record);
std::optional<DedupRecord> decode_dedup(std::string_view bytes,
                                        std::uint32_t format = kFormatVersion);

// An idempotency key whose work is done (`q work`): when it is forgotten.
struct DoneRecord {
  Millis expires = 0;
};
std::string encode(const DoneRecord& record);
std::optional<DoneRecord> decode_done(std::string_view bytes,
                                      std::uint32_t format = kFormatVersion);

// A FIFO group's head offered for delivery (value of `heads`): the group's
// name. Format 1 stored the bare name.
std::string encode_head(std::string_view group);
std::optional<std::string> decode_head(std::string_view bytes,
                                       std::uint32_t format = kFormatVersion);

// The numbers of the meta database (next-seq, next-qid). Format 1 stored a
// bare u64 (next-seq) or u32 (next-qid); format 2 a checksummed u64 for both.
std::string encode_meta_number(std::uint64_t value);
std::optional<std::uint64_t> decode_meta_number(std::string_view bytes,
                                                std::uint32_t format = kFormatVersion);

// The `q-format` value: a bare little-endian u32 in every format, so that any
// q, old or new, can read it and refuse a format it does not know by name.
std::string encode_format(std::uint32_t format);
std::optional<std::uint32_t> decode_format(std::string_view bytes);

// ---- the `holders` database (issue 14) ------------------------------------------
// Which process holds which lease, per queue. Keys start with a tag byte:
//   'c' (qid)                      -> HolderCheck: when the holders' liveness was checked
//   'h' (qid, pid, start)          -> HolderRecord: a holder of leases of the queue
//   'l' (qid, pid, start, seq)     -> empty: the holder's leases, found by prefix
//   'm' (qid, seq)                 -> LeaseHolder: who holds message seq's delivery
// Values start with a CRC-32C and a version byte (1).
constexpr std::uint8_t kHolderRecordVersion = 1;
struct HolderCheck {
  Millis checked_at = 0;
};
struct HolderRecord {
  std::uint64_t pid_namespace = 0;
  Millis registered_at = 0;
};
// The delivery a holder took: a later one (another nonce) is not its to release.
struct LeaseHolder {
  std::uint32_t pid = 0;
  std::uint64_t start_time = 0;
  std::uint64_t nonce = 0;
};
std::string encode(const HolderCheck& check);
std::string encode(const HolderRecord& record);
std::string encode(const LeaseHolder& lease);
std::optional<HolderCheck> decode_holder_check(std::string_view bytes);
std::optional<HolderRecord> decode_holder(std::string_view bytes);
std::optional<LeaseHolder> decode_lease_holder(std::string_view bytes);
std::string key_holder_check(std::uint32_t qid);
std::string key_holders(std::uint32_t qid);  // prefix of the queue's 'h' keys
std::string key_holder(std::uint32_t qid, std::uint32_t pid, std::uint64_t start_time);
std::string key_holder_lease(std::uint32_t qid, std::uint32_t pid, std::uint64_t start_time,
                             std::uint64_t seq);
std::string key_lease_holder(std::uint32_t qid, std::uint64_t seq);
// Of an 'h' key (or the start of an 'l' key): pid and start time.
std::pair<std::uint32_t, std::uint64_t> key_holder_id(std::string_view key);
std::uint64_t key_holder_lease_seq(std::string_view key);  // seq of an 'l' key

}  // namespace q::store
