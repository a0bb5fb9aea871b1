#include "libq/lmdb/records.hpp"

#include <cstring>

#include "libq/lmdb/codec.hpp"

namespace q::store {
namespace {

constexpr std::uint8_t kHeaderVersion = 1;
constexpr std::uint8_t kHeaderVersionHolder = 2;  // + holder_pid, holder_since, has_history
constexpr std::uint8_t kAttemptsVersion = 1;
constexpr std::uint8_t kWorkerVersion = 1;
constexpr std::uint8_t kPauseVersion = 1;
constexpr std::uint8_t kBodyVersion = 1;
// Queue records without a stale ack counted keep version 1 (what older q
// wrote and reads); version 2 appends the count of stale acks.
constexpr std::uint8_t kQueueVersion = 1;
constexpr std::uint8_t kQueueVersionStale = 2;
constexpr std::uint8_t kGroupVersion = 1;
constexpr std::uint8_t kDedupVersion = 1;
constexpr std::uint8_t kDoneVersion = 1;
constexpr std::uint8_t kMetaVersion = 1;
constexpr std::uint8_t kHeadVersion = 1;

}  // namespace

// ---- records ----------------------------------------------------------------

std::string encode(const Header& h) {
  Writer w;
  w.begin();
  const bool v2 = h.holder_pid != 0 || h.holder_since != 0 || h.has_history;
  w.u8(v2 ? kHeaderVersionHolder : kHeaderVersion);
  w.u8(h.flags);
  w.u32(h.receive_count);
  w.i64(h.sent_at);
  w.i64(h.visible_at);
  w.i64(h.available_at);
  w.i64(h.first_received_at);
  w.i64(h.last_received_at);
  w.i64(h.dead_at);
  w.u64(h.nonce);
  w.str(h.reason);
  w.str(h.group);
  if (v2) {
    w.u32(h.holder_pid);
    w.i64(h.holder_since);
    w.u8(h.has_history ? 1 : 0);
  }
  return w.seal();
}

std::optional<Header> decode_header(std::string_view bytes) {
  Reader r(bytes);
  const std::uint8_t version = r.u8();
  if (version != kHeaderVersion && version != kHeaderVersionHolder) return std::nullopt;
  Header h;
  h.flags = r.u8();
  h.receive_count = r.u32();
  h.sent_at = r.i64();
  h.visible_at = r.i64();
  h.available_at = r.i64();
  h.first_received_at = r.i64();
  h.last_received_at = r.i64();
  h.dead_at = r.i64();
  h.nonce = r.u64();
  h.reason = r.str();
  h.group = r.str();
  if (version == kHeaderVersionHolder) {
    h.holder_pid = r.u32();
    h.holder_since = r.i64();
    std::uint8_t history = r.u8();
    if (history > 1) return std::nullopt;
    h.has_history = history == 1;
    // encode writes version 1 for these: one encoding per header.
    if (h.holder_pid == 0 && h.holder_since == 0 && !h.has_history) return std::nullopt;
  }
  if (!r.done()) return std::nullopt;
  return h;
}

std::string encode(const Body& b) {
  Writer w(kBodyVersion);
  w.u32(static_cast<std::uint32_t>(b.attributes.size()));
  for (const auto& [key, value] : b.attributes) {
    w.str(key);
    w.str(value);
  }
  w.str(b.dedup_id);
  w.tail(b.body);
  return w.seal();
}

std::optional<Body> decode_body(std::string_view bytes) {
  Reader r(bytes);
  if (r.u8() != kBodyVersion) return std::nullopt;
  Body b;
  std::uint32_t n = r.u32();
  if (!r.ok() || n > kMaxAttributes) return std::nullopt;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string key = r.str();
    std::string value = r.str();
    b.attributes.emplace_back(std::move(key), std::move(value));
  }
  b.dedup_id = r.str();
  if (!r.ok()) return std::nullopt;
  b.body = r.rest();
  return b;
}

std::string encode(const QueueRecord& q) {
  Writer w(q.counters.stale_acks ? kQueueVersionStale : kQueueVersion);
  w.u32(q.qid);
  w.i64(q.created_at);
  w.i64(q.config.visibility_timeout);
  w.u32(q.config.max_receives);
  w.i64(q.config.retention);
  w.i64(q.config.delay);
  w.u64(q.config.max_depth);
  w.u32(q.config.max_size);
  w.i64(q.config.dedup_window);
  std::uint64_t rate_bits;
  std::memcpy(&rate_bits, &q.config.rate, 8);
  w.u64(rate_bits);
  w.i64(q.rate_tat_us);
  w.u8(static_cast<std::uint8_t>((q.config.fifo ? 1 : 0) | (q.config.content_dedup ? 2 : 0)));
  w.u64(q.groups);
  w.u64(q.held_groups);
  const auto& c = q.counters;
  for (auto v : {c.sent, c.received, c.acked, c.nacked, c.dead_lettered, c.redriven, c.expired,
                 c.deduplicated})
    w.u64(v);
  w.u64(q.ready);
  w.u64(q.delayed);
  w.u64(q.leased);
  w.u64(q.dead);
  if (q.counters.stale_acks) w.u64(q.counters.stale_acks);
  return w.seal();
}

std::optional<QueueRecord> decode_queue(std::string_view bytes) {
  Reader r(bytes);
  std::uint8_t version = r.u8();
  if (version != kQueueVersion && version != kQueueVersionStale) return std::nullopt;
  QueueRecord q;
  q.qid = r.u32();
  q.created_at = r.i64();
  q.config.visibility_timeout = r.i64();
  q.config.max_receives = r.u32();
  q.config.retention = r.i64();
  q.config.delay = r.i64();
  q.config.max_depth = r.u64();
  q.config.max_size = r.u32();
  q.config.dedup_window = r.i64();
  std::uint64_t rate_bits = r.u64();
  std::memcpy(&q.config.rate, &rate_bits, 8);
  q.rate_tat_us = r.i64();
  std::uint8_t kind = r.u8();
  if (kind & ~3u) return std::nullopt;  // bits this format does not define
  q.config.fifo = kind & 1;
  q.config.content_dedup = kind & 2;
  q.groups = r.u64();
  q.held_groups = r.u64();
  auto& c = q.counters;
  for (auto* v : {&c.sent, &c.received, &c.acked, &c.nacked, &c.dead_lettered, &c.redriven,
                  &c.expired, &c.deduplicated})
    *v = r.u64();
  q.ready = r.u64();
  q.delayed = r.u64();
  q.leased = r.u64();
  q.dead = r.u64();
  // Version 2 is written only with a count (one encoding per record).
  if (version == kQueueVersionStale && (q.counters.stale_acks = r.u64()) == 0) return std::nullopt;
  if (!r.done()) return std::nullopt;
  return q;
}

std::string encode(const GroupRecord& g) {
  Writer w(kGroupVersion);
  w.u64(g.messages);
  w.u64(g.in_flight);
  return w.seal();
}

std::optional<GroupRecord> decode_group(std::string_view bytes, std::uint32_t format) {
  Reader r(bytes);
  if (format >= 2 && r.u8() != kGroupVersion) return std::nullopt;
  GroupRecord g;
  g.messages = r.u64();
  g.in_flight = r.u64();
  if (!r.done()) return std::nullopt;
  return g;
}

std::string encode(const std::vector<Attempt>& attempts) {
  Writer w(kAttemptsVersion);
  w.u8(static_cast<std::uint8_t>(attempts.size()));
  for (const auto& a : attempts) {
    w.u32(a.receive);
    w.i64(a.received_at);
    w.u32(a.pid);
    w.i64(a.worker_since);
    w.u8(static_cast<std::uint8_t>(a.end));
    w.i64(a.ended_at);
    w.str(a.reason);
    w.u8(a.run.exit_status ? 1 : 0);
    w.u32(static_cast<std::uint32_t>(a.run.exit_status.value_or(0)));
    w.str(a.run.first_line);
    w.str(a.run.stderr_tail);
    w.str(a.command);
  }
  return w.seal();
}

std::optional<std::vector<Attempt>> decode_attempts(std::string_view bytes) {
  Reader r(bytes);
  if (r.u8() != kAttemptsVersion) return std::nullopt;
  std::size_t n = r.u8();
  if (!r.ok() || n > kMaxAttempts) return std::nullopt;
  std::vector<Attempt> attempts(n);
  for (auto& a : attempts) {
    a.receive = r.u32();
    a.received_at = r.i64();
    a.pid = r.u32();
    a.worker_since = r.i64();
    std::uint8_t end = r.u8();
    if (end > static_cast<std::uint8_t>(AttemptEnd::DeadLettered)) return std::nullopt;
    a.end = static_cast<AttemptEnd>(end);
    a.ended_at = r.i64();
    a.reason = r.str();
    std::uint8_t has_status = r.u8();
    auto status = static_cast<std::int32_t>(r.u32());
    if (has_status > 1) return std::nullopt;
    if (has_status) a.run.exit_status = status;
    a.run.first_line = r.str();
    a.run.stderr_tail = r.str();
    a.command = r.str();
  }
  if (!r.done()) return std::nullopt;
  return attempts;
}

std::string key_worker(std::uint32_t pid, Millis since) {
  std::string k;
  put_be32(k, pid);
  put_be64(k, time_bits(since));
  return k;
}
std::uint32_t key_worker_pid(std::string_view key) {
  return static_cast<std::uint32_t>(get_be(key, 0, 4));
}
Millis key_worker_since(std::string_view key) { return static_cast<Millis>(get_be(key, 4, 8)); }

std::string encode_worker(const std::string& command) {
  Writer w(kWorkerVersion);
  w.str(command);
  return w.seal();
}

std::optional<std::string> decode_worker(std::string_view bytes) {
  Reader r(bytes);
  if (r.u8() != kWorkerVersion) return std::nullopt;
  std::string command = r.str();
  if (!r.done()) return std::nullopt;
  return command;
}

std::string encode(const Pause& p) {
  Writer w(kPauseVersion);
  w.i64(p.since);
  w.i64(p.until);
  w.str(p.reason);
  return w.seal();
}

std::optional<Pause> decode_pause(std::string_view bytes) {
  Reader r(bytes);
  if (r.u8() != kPauseVersion) return std::nullopt;
  Pause p;
  p.since = r.i64();
  p.until = r.i64();
  p.reason = r.str();
  if (!r.done()) return std::nullopt;
  return p;
}

std::string encode(const DedupRecord& d) {
  Writer w(kDedupVersion);
  w.u64(d.seq);
  w.i64(d.expires);
  return w.seal();
}

std::optional<DedupRecord> decode_dedup(std::string_view bytes, std::uint32_t format) {
  if (format < 2) {  // (seq u64, expires i64), no checksum
    if (bytes.size() != 16) return std::nullopt;
    return DedupRecord{*bare<std::uint64_t>(bytes), *bare<std::int64_t>(bytes, 8)};
  }
  Reader r(bytes);
  if (r.u8() != kDedupVersion) return std::nullopt;
  DedupRecord d;
  d.seq = r.u64();
  d.expires = r.i64();
  if (!r.done()) return std::nullopt;
  return d;
}

std::string encode(const DoneRecord& d) {
  Writer w(kDoneVersion);
  w.i64(d.expires);
  return w.seal();
}

std::optional<DoneRecord> decode_done(std::string_view bytes, std::uint32_t format) {
  if (format < 2) {  // expires i64, no checksum
    if (bytes.size() != 8) return std::nullopt;
    return DoneRecord{*bare<std::int64_t>(bytes)};
  }
  Reader r(bytes);
  if (r.u8() != kDoneVersion) return std::nullopt;
  DoneRecord d;
  d.expires = r.i64();
  if (!r.done()) return std::nullopt;
  return d;
}

std::string encode_head(std::string_view group) {
  Writer w(kHeadVersion);
  w.tail(group);
  return w.seal();
}

std::optional<std::string> decode_head(std::string_view bytes, std::uint32_t format) {
  if (format < 2) return std::string(bytes);
  Reader r(bytes);
  if (r.u8() != kHeadVersion || !r.ok()) return std::nullopt;
  return r.rest();
}

std::string encode_meta_number(std::uint64_t value) {
  Writer w(kMetaVersion);
  w.u64(value);
  return w.seal();
}

std::optional<std::uint64_t> decode_meta_number(std::string_view bytes, std::uint32_t format) {
  if (format < 2) {  // next-seq: u64; next-qid: u32
    if (bytes.size() == 8) return bare<std::uint64_t>(bytes);
    if (bytes.size() == 4) return bare<std::uint32_t>(bytes);
    return std::nullopt;
  }
  Reader r(bytes);
  if (r.u8() != kMetaVersion) return std::nullopt;
  std::uint64_t v = r.u64();
  if (!r.done()) return std::nullopt;
  return v;
}

std::string encode_format(std::uint32_t format) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &format, 4);
  return s;
}

std::optional<std::uint32_t> decode_format(std::string_view bytes) {
  if (bytes.size() != 4) return std::nullopt;
  return bare<std::uint32_t>(bytes);
}

std::string key_group_prefix(std::uint32_t qid, std::string_view group) {
  std::string k = key_q(qid);
  k.push_back(static_cast<char>(group.size()));
  k.append(group);
  return k;
}

namespace {

// CRC, then the version byte; false when either is wrong.
bool holder_version(Reader& r) { return r.u8() == kHolderRecordVersion && r.ok(); }

std::string holder_key(char tag, std::uint32_t qid) {
  std::string k(1, tag);
  put_be32(k, qid);
  return k;
}

}  // namespace

std::string encode(const HolderCheck& c) {
  Writer w(kHolderRecordVersion);
  w.i64(c.checked_at);
  return w.seal();
}

std::string encode(const HolderRecord& h) {
  Writer w(kHolderRecordVersion);
  w.u64(h.pid_namespace);
  w.i64(h.registered_at);
  return w.seal();
}

std::string encode(const LeaseHolder& l) {
  Writer w(kHolderRecordVersion);
  w.u32(l.pid);
  w.u64(l.start_time);
  w.u64(l.nonce);
  return w.seal();
}

std::optional<HolderCheck> decode_holder_check(std::string_view bytes) {
  Reader r(bytes);
  if (!holder_version(r)) return std::nullopt;
  HolderCheck c;
  c.checked_at = r.i64();
  if (!r.done()) return std::nullopt;
  return c;
}

std::optional<HolderRecord> decode_holder(std::string_view bytes) {
  Reader r(bytes);
  if (!holder_version(r)) return std::nullopt;
  HolderRecord h;
  h.pid_namespace = r.u64();
  h.registered_at = r.i64();
  if (!r.done()) return std::nullopt;
  return h;
}

std::optional<LeaseHolder> decode_lease_holder(std::string_view bytes) {
  Reader r(bytes);
  if (!holder_version(r)) return std::nullopt;
  LeaseHolder l;
  l.pid = r.u32();
  l.start_time = r.u64();
  l.nonce = r.u64();
  if (!r.done()) return std::nullopt;
  return l;
}

std::string key_holder_check(std::uint32_t qid) { return holder_key('c', qid); }
std::string key_holders(std::uint32_t qid) { return holder_key('h', qid); }

std::string key_holder(std::uint32_t qid, std::uint32_t pid, std::uint64_t start_time) {
  std::string k = holder_key('h', qid);
  put_be32(k, pid);
  put_be64(k, start_time);
  return k;
}

std::string key_holder_lease(std::uint32_t qid, std::uint32_t pid, std::uint64_t start_time,
                             std::uint64_t seq) {
  std::string k = holder_key('l', qid);
  put_be32(k, pid);
  put_be64(k, start_time);
  put_be64(k, seq);
  return k;
}

std::string key_lease_holder(std::uint32_t qid, std::uint64_t seq) {
  std::string k = holder_key('m', qid);
  put_be64(k, seq);
  return k;
}

std::pair<std::uint32_t, std::uint64_t> key_holder_id(std::string_view key) {
  return {static_cast<std::uint32_t>(get_be(key, 5, 4)), get_be(key, 9, 8)};
}

std::uint64_t key_holder_lease_seq(std::string_view key) { return get_be(key, 17, 8); }

}  // namespace q::store
