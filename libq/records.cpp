#include "records.hpp"

#include <array>
#include <cstring>

namespace q::store {
namespace {

// ---- CRC-32C (Castagnoli), hardware instruction where the CPU has it ----------

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

std::uint32_t crc32c_table(const unsigned char* p, std::size_t n, std::uint32_t crc) {
  static const auto table = make_crc_table();
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const unsigned char* p, std::size_t n,
                                                             std::uint32_t crc) {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n > 0) {
    c32 = __builtin_ia32_crc32qi(c32, *p++);
    --n;
  }
  return c32;
}
#endif

// ---- byte writer and reader ------------------------------------------------------

class Writer {
 public:
  Writer() = default;
  // A record: the checksum slot (see begin), then its version byte.
  explicit Writer(std::uint8_t version) {
    begin();
    u8(version);
  }
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void tail(std::string_view s) { out_.append(s); }
  // Reserves the checksum slot; seal() fills it.
  void begin() { out_.assign(4, '\0'); }
  std::string seal() {
    std::uint32_t crc = crc32c(out_.data() + 4, out_.size() - 4);
    std::memcpy(out_.data(), &crc, 4);
    return std::move(out_);
  }

 private:
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  // Checks the checksum; ok() is false from then on when it does not match.
  explicit Reader(std::string_view bytes) : in_(bytes) {
    std::uint32_t stored = 0;
    if (!take(&stored, 4)) return;
    ok_ = stored == crc32c(in_.data(), in_.size());
  }
  bool ok() const { return ok_; }
  std::uint8_t u8() {
    std::uint8_t v = 0;
    take(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    take(&v, 4);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    take(&v, 8);
    return v;
  }
  std::int64_t i64() {
    std::int64_t v = 0;
    take(&v, 8);
    return v;
  }
  std::string str() {
    std::uint32_t n = u32();
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  std::string rest() {
    std::string s(in_);
    in_ = {};
    return s;
  }
  bool done() const { return ok_ && in_.empty(); }

 private:
  bool take(void* p, std::size_t n) {
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return false;
    }
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  std::string_view in_;
  bool ok_ = true;
};

void put_be32(std::string& s, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (i * 8)) & 0xFF));
}
void put_be64(std::string& s, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>((v >> (i * 8)) & 0xFF));
}
std::uint64_t get_be(std::string_view s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes && at + i < s.size(); ++i)
    v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Times before the epoch are clamped: keys order unsigned.
std::uint64_t time_bits(Millis t) { return t < 0 ? 0 : static_cast<std::uint64_t>(t); }

constexpr std::uint8_t kHeaderVersion = 1;
constexpr std::uint8_t kHeaderVersionHolder = 2;  // + holder_pid, holder_since, has_history
constexpr std::uint8_t kAttemptsVersion = 1;
constexpr std::uint8_t kWorkerVersion = 1;
constexpr std::uint8_t kPauseVersion = 1;
constexpr std::uint8_t kBodyVersion = 1;
constexpr std::uint8_t kQueueVersion = 1;
constexpr std::uint8_t kGroupVersion = 1;
constexpr std::uint8_t kDedupVersion = 1;
constexpr std::uint8_t kDoneVersion = 1;
constexpr std::uint8_t kMetaVersion = 1;
constexpr std::uint8_t kHeadVersion = 1;

// Format 1 stored these values as bare native-endian integers.
template <typename T>
std::optional<T> bare(std::string_view bytes, std::size_t at = 0) {
  T v{};
  if (bytes.size() < at + sizeof v) return std::nullopt;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  crc = has_sse42 ? crc32c_sse42(p, size, crc) : crc32c_table(p, size, crc);
#else
  crc = crc32c_table(p, size, crc);
#endif
  return ~crc;
}

// ---- keys -------------------------------------------------------------------

std::string key_q(std::uint32_t qid) {
  std::string k;
  put_be32(k, qid);
  return k;
}
std::string key_q_seq(std::uint32_t qid, std::uint64_t seq) {
  std::string k = key_q(qid);
  put_be64(k, seq);
  return k;
}
std::string key_q_time_seq(std::uint32_t qid, Millis time, std::uint64_t seq) {
  std::string k = key_q(qid);
  put_be64(k, time_bits(time));
  put_be64(k, seq);
  return k;
}
std::string key_q_bytes(std::uint32_t qid, std::string_view bytes) {
  std::string k = key_q(qid);
  k.append(bytes);
  return k;
}
std::string key_q_time_bytes(std::uint32_t qid, Millis time, std::string_view bytes) {
  std::string k = key_q(qid);
  put_be64(k, time_bits(time));
  k.append(bytes);
  return k;
}
std::string key_seq(std::uint64_t seq) {
  std::string k;
  put_be64(k, seq);
  return k;
}
std::uint32_t key_qid(std::string_view key) {
  return static_cast<std::uint32_t>(get_be(key, 0, 4));
}
Millis key_time(std::string_view key) { return static_cast<Millis>(get_be(key, 4, 8)); }
std::uint64_t key_time_seq(std::string_view key) { return get_be(key, 12, 8); }
std::uint64_t key_q_seq_seq(std::string_view key) { return get_be(key, 4, 8); }
std::string_view key_time_bytes(std::string_view key) {
  return key.size() > 12 ? key.substr(12) : std::string_view{};
}

// ---- ids and receipts ----------------------------------------------------------
// An id is 'm' and the message's sequence number in lowercase hex; a receipt is
// the id, '.', and 16 hex digits of the delivery's nonce. Both are safe unquoted
// in a shell and never start with '-'.

std::string message_id(std::uint64_t seq) {
  static const char digits[] = "0123456789abcdef";
  char buf[17];
  int n = 0;
  do {
    buf[n++] = digits[seq & 0xF];
    seq >>= 4;
  } while (seq != 0);
  std::string id = "m";
  while (n > 0) id.push_back(buf[--n]);
  return id;
}

namespace {
std::optional<std::uint64_t> parse_hex(std::string_view s, std::size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}
}  // namespace

std::optional<std::uint64_t> parse_message_id(std::string_view id) {
  if (id.size() < 2 || id[0] != 'm') return std::nullopt;
  if (id.size() > 2 && id[1] == '0') return std::nullopt;  // one spelling per id
  return parse_hex(id.substr(1), 16);
}

std::string receipt(std::uint64_t seq, std::uint64_t nonce) {
  static const char digits[] = "0123456789abcdef";
  std::string r = message_id(seq);
  r.push_back('.');
  for (int i = 15; i >= 0; --i) r.push_back(digits[(nonce >> (i * 4)) & 0xF]);
  return r;
}

std::optional<ParsedReceipt> parse_receipt(std::string_view text) {
  auto dot = text.find('.');
  if (dot == std::string_view::npos || text.size() - dot - 1 != 16) return std::nullopt;
  auto seq = parse_message_id(text.substr(0, dot));
  auto nonce = parse_hex(text.substr(dot + 1), 16);
  if (!seq || !nonce || *nonce == 0) return std::nullopt;
  return ParsedReceipt{*seq, *nonce};
}

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
  Writer w(kQueueVersion);
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
  return w.seal();
}

std::optional<QueueRecord> decode_queue(std::string_view bytes) {
  Reader r(bytes);
  if (r.u8() != kQueueVersion) return std::nullopt;
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
