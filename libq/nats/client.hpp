// A thin C++ layer over the NATS C client (libnats 3.4.1) for NatsBroker:
// owning handles, errors as q::Error, retries of requests that are safe to
// repeat, and the compare-and-set record store on a JetStream KV bucket that
// q's lease records live in. Nothing here knows about queues.
#pragma once

#include <nats/nats.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libq/clock.hpp"
#include "libq/error.hpp"
#include "libq/location.hpp"
#include "libq/nats/broker.hpp"

namespace q::nats {

// nats://[USER:PASSWORD@]h1:p1,h2:p2/NAMESPACE (or tls://...), parsed. Hosts
// without a port get 4222.
struct Location {
  std::vector<std::string> servers;   // "nats://host:port" or "tls://host:port", no user info
  std::string ns;                     // 1 to 32 of letters, digits, '-'
  bool tls = false;                   // tls://: TLS required
  std::optional<UserInfo> user_info;  // USER:PASSWORD@ or TOKEN@, percent-decoded
  std::string shown;                  // the location as printed (redact_location)
};
// Throws Error(Usage) naming the location (redacted) and what is wrong with it.
Location parse_location(const std::string& location);

// A name for JetStream (stream names, subject tokens, KV keys) from a q name
// (letters, digits, '-', '_', '.'): '_' becomes "__" and '.' becomes "_d", so
// the result has no '.' and different names never meet.
std::string encode_name(const std::string& name);
std::optional<std::string> decode_name(const std::string& encoded);

template <class T, void (*Destroy)(T*)>
struct Deleter {
  void operator()(T* p) const { Destroy(p); }
};
using MsgPtr = std::unique_ptr<natsMsg, Deleter<natsMsg, natsMsg_Destroy>>;

// JetStream's error codes q tells apart.
inline constexpr jsErrCode kNoMessageFound = static_cast<jsErrCode>(10037);
inline constexpr jsErrCode kStreamNotFound = static_cast<jsErrCode>(10059);
inline constexpr jsErrCode kWrongLastSequence = static_cast<jsErrCode>(10071);
using StreamInfoPtr = std::unique_ptr<jsStreamInfo, Deleter<jsStreamInfo, jsStreamInfo_Destroy>>;
using ConsumerInfoPtr =
    std::unique_ptr<jsConsumerInfo, Deleter<jsConsumerInfo, jsConsumerInfo_Destroy>>;
using SubPtr =
    std::unique_ptr<natsSubscription, Deleter<natsSubscription, natsSubscription_Destroy>>;
using PubAckPtr = std::unique_ptr<jsPubAck, Deleter<jsPubAck, jsPubAck_Destroy>>;
using MetaPtr = std::unique_ptr<jsMsgMetaData, Deleter<jsMsgMetaData, jsMsgMetaData_Destroy>>;

// Errors the cluster gives while a node is down or a leader is being elected:
// the same request may succeed a moment later.
bool transient(natsStatus s, jsErrCode code = static_cast<jsErrCode>(0));

// One record of the KV bucket as read: its value and revision (the sequence
// of the bucket stream's message that holds it).
struct Record {
  std::string value;
  std::uint64_t revision = 0;
};

class Client {
 public:
  // Connects to the location's servers; `timeout` bounds every retried call
  // (a node down, a leader election) before Error(Busy).
  Client(const Location& location, const NatsCredentials& credentials, Millis timeout);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  natsConnection* nc() const { return nc_; }
  jsCtx* js() const { return js_; }
  const Location& location() const { return location_; }
  // How many servers the cluster has (those known from the INFO gossip).
  int cluster_size() const;

  // Runs `call` until it returns neither a transient error nor runs past the
  // timeout; then Error(Busy) on a transient error, else the status.
  natsStatus retry(const std::string& what, const std::function<natsStatus(jsErrCode*)>& call,
                   jsErrCode* code = nullptr);
  // Error(Busy) or Error(Io) for a failed call, naming `what`.
  [[noreturn]] void fail(const std::string& what, natsStatus s, jsErrCode code) const;

  // A request on a core subject (acks on `$JS.ACK...`), retried; true when
  // the server answered.
  void request(const std::string& subject, const std::string& data);

  // The message stored at `seq` in `stream` (the stream API's get, retried);
  // nullptr when there is none (deleted, or past the stream's end), and with
  // missing_stream_ok when the stream itself is gone; Error naming `what` on
  // any other failure.
  MsgPtr stored_message(const std::string& stream, std::uint64_t seq, const std::string& what,
                        bool missing_stream_ok = false);

  // The first message at or after sequence `from` of `stream` on `subject`
  // (STREAM.MSG.GET with next_by_subj, answered by the stream's leader, so it
  // sees every ack that was confirmed): the API's "message" object (seq,
  // subject, base64 data and hdrs). nullopt when there is none, and with
  // missing_stream_ok when the stream is gone; Error naming `what` else.
  std::optional<nlohmann::json> next_by_subject(const std::string& stream, std::uint64_t from,
                                                const std::string& subject, const std::string& what,
                                                bool missing_stream_ok = false);

  // The state of `stream` (counts, first and last sequence), retried; nullopt
  // when the stream does not exist; Error naming `what` on any other failure.
  std::optional<jsStreamState> stream_state(const std::string& stream, const std::string& what);

  // ---- records on a KV bucket, by the stream API (for its error codes) ----
  // Names the bucket; it is looked up (and made when missing) only at its
  // first use, and a record read that finds the bucket there needs no lookup
  // of its own: a one-shot send reads one record and publishes (bucket.cpp).
  void open_bucket(const std::string& bucket, int replicas);
  // The bucket stream is there (made now when missing): once per Client.
  void ensure_bucket();
  std::optional<Record> get(const std::string& key);
  // What put_if does when another writer holds the claim on the revision:
  // wait (up to the timeout) for it to clear or be judged dead, or pass at
  // once (a receive, which has other messages to take).
  enum class OnClaim { Wait, Pass };
  // Writes `value` when the key's revision is still `expected` (0: the key has
  // no record). Returns the new revision, or nullopt when another write came
  // first. Retry-safe: `value` must be unique to this write (carry a token),
  // so a retried write that had in fact succeeded is recognised. Exact on a
  // cluster too: see put_if in nats/client.cpp. A claim held past the
  // timeout is Error(Busy) naming it (OnClaim::Wait).
  std::optional<std::uint64_t> put_if(const std::string& key, const std::string& value,
                                      std::uint64_t expected, OnClaim on_claim = OnClaim::Wait);
  // The cluster's time now (ms since the epoch, by the bucket leader's
  // clock): one probe record written and read back.
  Millis server_now();
  // A record with the server's time it was written at (ms since the epoch).
  struct Dated {
    Record record;
    Millis written_at = 0;
  };
  std::optional<Dated> get_dated(const std::string& key);
  // A claim `cas.R` older than this by the cluster's clock was left by a
  // writer that died between its claim and its write.
  static constexpr Millis kStaleClaim = 5 * kSecond;
  // Removes the record at `revision` (no tombstone); a newer record stays.
  void remove(std::uint64_t revision);
  // Every record whose key matches `filter` (NATS wildcards), with its key.
  void each(const std::string& filter,
            const std::function<void(const std::string& key, const Record&)>& each);
  // Removes every record whose key matches `filter`.
  void purge(const std::string& filter);
  // The bucket stream's name and the subject of `key`, for requests made
  // outside this class; the bucket is there once they return.
  const std::string& bucket_stream() {
    ensure_bucket();
    return bucket_stream_;
  }
  std::string bucket_subject(const std::string& key) {
    ensure_bucket();
    return subject(key);
  }
  // One expected-revision publish, retried and recognised when a retry finds
  // it stored; exact only when `expected` is 0 or the writer holds the claim
  // `cas.<expected>` (put_if, nats/pipeline.hpp).
  std::optional<std::uint64_t> publish_if(const std::string& key, const std::string& value,
                                          std::uint64_t expected);
  // The value of a new claim record: this process, its host and a token.
  std::string new_claim_value() const;

  // Receives every asynchronous publish's outcome (js_PublishMsgAsync); the
  // message is the caller's to destroy.
  std::function<void(natsMsg*, jsPubAck*, jsPubAckErr*)> on_pub_ack;

 private:
  Location location_;
  Millis timeout_;
  std::string nkey_seed_;  // NATS_NKEY's seed, for the signature callback
  std::string login_;      // the credentials used, named for errors (no secret)
  void set_credentials(const NatsCredentials& credentials);
  [[noreturn]] void connect_failed(natsStatus s) const;
  // The last "Permissions Violation" the server sent (asynchronously), empty
  // when none: a refused request then only times out.
  std::string permission_violation() const;
  std::unique_ptr<struct PermissionLog> violations_;
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  kvStore* kv_ = nullptr;
  std::string bucket_;
  std::string bucket_stream_;  // KV_<bucket>
  int bucket_replicas_ = 1;
  bool bucket_known_ = false;  // looked up (or a read found it there)
  std::string subject(const std::string& key) const { return "$KV." + bucket_ + "." + key; }
};

// Messages the connections of every Client destroyed so far published: the
// requests of a command, for the bench.
std::uint64_t messages_sent_by_closed_clients();

// A random token of 32 hex digits (write ids, send ids).
std::string random_token();
// nats.c's text of the last error of this thread (its status's text when none).
std::string last_error_text();

}  // namespace q::nats
