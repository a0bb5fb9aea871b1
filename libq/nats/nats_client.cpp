#include "nats_client.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "nats_nkey.hpp"
#include "nats_stage.hpp"
#include "timefmt.hpp"

namespace q::nats {
namespace {

constexpr jsErrCode kWrongLastSequence = static_cast<jsErrCode>(10071);
constexpr jsErrCode kStreamNotFound = static_cast<jsErrCode>(10059);
constexpr jsErrCode kNoMessageFound = static_cast<jsErrCode>(10037);
constexpr jsErrCode kClusterNotAvailable = static_cast<jsErrCode>(10008);

bool is_ns_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

std::string last_error_text() {
  natsStatus s = NATS_OK;
  const char* text = nats_GetLastError(&s);
  if (text && *text) return text;
  return natsStatus_GetText(s);
}

}  // namespace

Location parse_location(const std::string& text) {
  const std::string shown = redact_location(text);
  auto bad = [&](const std::string& why) {
    throw Error(ErrorKind::Usage,
                fmt::format("location '{}': {} (expected nats://[USER:PASSWORD@]HOST:PORT"
                            "[,HOST:PORT...]/NAMESPACE or tls://...)",
                            shown, why));
  };
  Location loc;
  loc.shown = shown;
  std::string scheme;
  if (text.compare(0, 7, "nats://") == 0)
    scheme = "nats://";
  else if (text.compare(0, 6, "tls://") == 0)
    scheme = "tls://", loc.tls = true;
  else
    bad("not a nats:// or tls:// location");
  SplitLocation split = split_user_info(text);
  loc.user_info = split.user_info;
  if (loc.user_info && loc.user_info->user.empty())
    bad("the user info before '@' must be USER:PASSWORD or a token");
  if (loc.user_info && loc.user_info->user.find(',') != std::string::npos)
    bad("USER:PASSWORD@ goes before the first server, once for all");
  std::string rest = split.rest.substr(scheme.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos) bad("no namespace after the servers");
  loc.ns = rest.substr(slash + 1);
  if (loc.ns.empty() || loc.ns.size() > 32)
    bad("the namespace must be 1 to 32 letters, digits or '-'");
  for (char c : loc.ns)
    if (!is_ns_char(c)) bad("the namespace must be 1 to 32 letters, digits or '-'");
  std::string hosts = rest.substr(0, slash);
  std::size_t start = 0;
  while (start <= hosts.size()) {
    auto comma = hosts.find(',', start);
    std::string host =
        hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (host.empty()) bad("an empty server between commas");
    auto colon = host.rfind(':');
    if (colon == std::string::npos || host.find(']', colon) != std::string::npos) {
      host += ":4222";
    } else {
      std::string port = host.substr(colon + 1);
      char* end = nullptr;
      long n = std::strtol(port.c_str(), &end, 10);
      if (port.empty() || *end != '\0' || n < 1 || n > 65535)
        bad(fmt::format("server '{}': the port must be 1 to 65535", host));
    }
    loc.servers.push_back(scheme + host);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return loc;
}

std::string encode_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '_')
      out += "__";
    else if (c == '.')
      out += "_d";
    else
      out += c;
  }
  return out;
}

std::optional<std::string> decode_name(const std::string& encoded) {
  std::string out;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] != '_') {
      out += encoded[i];
      continue;
    }
    if (++i == encoded.size()) return std::nullopt;
    if (encoded[i] == '_')
      out += '_';
    else if (encoded[i] == 'd')
      out += '.';
    else
      return std::nullopt;
  }
  return out;
}

bool transient(natsStatus s, jsErrCode code) {
  if (code == kClusterNotAvailable) return true;
  return s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_DISCONNECTED ||
         s == NATS_NOT_YET_CONNECTED;
}

std::string random_token() {
  static thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

struct PermissionLog {
  std::mutex mu;
  std::string last;  // the last "Permissions Violation ..." the server sent
};

namespace {

// The server's -ERR 'Permissions Violation for Publish to "..."' comes
// asynchronously; the refused request itself only times out.
void on_async_error(natsConnection* nc, natsSubscription*, natsStatus s, void* closure) {
  if (s != NATS_NOT_PERMITTED) return;
  const char* text = nullptr;
  natsConnection_GetLastError(nc, &text);
  auto* log = static_cast<PermissionLog*>(closure);
  std::lock_guard<std::mutex> lock(log->mu);
  log->last = text && *text ? text : "permissions violation";
}

natsStatus sign_nonce(char** error, unsigned char** signature, int* length, const char* nonce,
                      void* closure) {
  natsStatus s =
      nats_Sign(static_cast<const std::string*>(closure)->c_str(), nonce, signature, length);
  if (s != NATS_OK && error) *error = strdup("cannot sign the server's nonce with NATS_NKEY");
  return s;
}

// A file the user named in `variable`: readable, else NotFound or Permission.
void check_readable(const char* variable, const std::string& path) {
  if (::access(path.c_str(), R_OK) == 0) return;
  int e = errno;
  throw Error(e == ENOENT   ? ErrorKind::NotFound
              : e == EACCES ? ErrorKind::Permission
                            : ErrorKind::Io,
              fmt::format("{} {}: {}", variable, path, std::strerror(e)));
}

// What answers on a server ("nats://host:port") that did not speak NATS in
// time: the first line it sends back to a "PING" within half a second
// (an HTTP server: "HTTP/1.1 400 Bad Request"); empty when nothing.
std::string probe(const std::string& server) {
  std::string hostport = server.substr(server.find("://") + 3);
  auto colon = hostport.rfind(':');
  std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) return {};
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> hold(found, ::freeaddrinfo);
  int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) return {};
  timeval tv{0, 500000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string line;
  char buf[200];
  ssize_t n = 0;
  if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::send(fd, "PING\r\n\r\n", 8, MSG_NOSIGNAL) == 8 && (n = ::recv(fd, buf, sizeof buf, 0)) > 0)
    for (ssize_t i = 0; i < n && buf[i] != '\r' && buf[i] != '\n' && line.size() < 60; ++i)
      line += std::isprint(static_cast<unsigned char>(buf[i])) ? buf[i] : '?';
  ::close(fd);
  return line;
}

bool contains_nocase(const std::string& text, const std::string& what) {
  auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  return lower(text).find(lower(what)) != std::string::npos;
}

}  // namespace

void Client::set_credentials(const NatsCredentials& c) {
  natsStatus s = NATS_OK;
  std::string user = c.user, password = c.password;
  bool from_url = location_.user_info.has_value();
  if (from_url) {
    user = location_.user_info->user;
    password = location_.user_info->password.value_or("");
  }
  bool has_password = from_url ? location_.user_info->password.has_value() : !c.password.empty();
  if (!c.password.empty() && c.user.empty() && !from_url)
    throw Error(ErrorKind::Usage, "NATS_PASSWORD is set but NATS_USER is not");
  // The location's user info wins over every variable; among those, one way.
  int ways = from_url ? 1 : !user.empty() + !c.creds.empty() + !c.nkey.empty();
  if (ways > 1)
    throw Error(ErrorKind::Usage,
                "more than one way to log in: choose one of NATS_USER (or USER:PASSWORD@ in the "
                "location), NATS_CREDS and NATS_NKEY");
  if (!user.empty() && has_password) {
    s = natsOptions_SetUserInfo(opts_, user.c_str(), password.c_str());
    login_ = fmt::format("user '{}' ({})", user,
                         from_url ? "USER:PASSWORD@ in the location" : "NATS_USER, NATS_PASSWORD");
  } else if (!user.empty()) {
    s = natsOptions_SetToken(opts_, user.c_str());
    login_ = from_url ? "the token in the location" : "the token in NATS_USER";
  } else if (!c.creds.empty()) {
    check_readable("NATS_CREDS", c.creds);
    check_creds_file(c.creds);
    s = natsOptions_SetUserCredentialsFromFiles(opts_, c.creds.c_str(), nullptr);
    login_ = fmt::format("the credentials in NATS_CREDS {}", c.creds);
  } else if (!c.nkey.empty()) {
    check_readable("NATS_NKEY", c.nkey);
    nkey_seed_ = read_nkey_seed(c.nkey);
    std::string public_key = nkey_public_key(nkey_seed_, "NATS_NKEY " + c.nkey);
    s = natsOptions_SetNKey(opts_, public_key.c_str(), sign_nonce, &nkey_seed_);
    login_ = fmt::format("NKey {} (NATS_NKEY)", public_key);
  } else {
    login_ = "no credentials (NATS_USER, NATS_CREDS or NATS_NKEY)";
  }
  if (s != NATS_OK) fail("setting the credentials", s, {});
  if (!c.ca.empty()) {
    check_readable("NATS_CA", c.ca);
    if (natsOptions_LoadCATrustedCertificates(opts_, c.ca.c_str()) != NATS_OK)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("NATS_CA {}: not PEM CA certificates ({})", c.ca, last_error_text()));
  }
  if (c.cert.empty() != c.key.empty())
    throw Error(ErrorKind::Usage, c.cert.empty() ? "NATS_KEY is set but NATS_CERT is not"
                                                 : "NATS_CERT is set but NATS_KEY is not");
  if (!c.cert.empty()) {
    check_readable("NATS_CERT", c.cert);
    check_readable("NATS_KEY", c.key);
    if (natsOptions_LoadCertificatesChain(opts_, c.cert.c_str(), c.key.c_str()) != NATS_OK)
      throw Error(ErrorKind::InvalidData,
                  fmt::format("NATS_CERT {}, NATS_KEY {}: not a PEM certificate and its key ({})",
                              c.cert, c.key, last_error_text()));
  }
}

Client::Client(const Location& location, const NatsCredentials& credentials, Millis timeout)
    : location_(location), timeout_(timeout), violations_(std::make_unique<PermissionLog>()) {
  std::vector<const char*> servers;
  for (const auto& s : location_.servers) servers.push_back(s.c_str());
  natsStatus s = natsOptions_Create(&opts_);
  if (s == NATS_OK)
    s = natsOptions_SetServers(opts_, servers.data(), static_cast<int>(servers.size()));
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts_, std::min<Millis>(timeout_, 2000));
  // A node going away mid-command: reconnect to another one at once.
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts_, 1000);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts_, 50);
  if (s == NATS_OK && location_.tls) s = natsOptions_SetSecure(opts_, true);
  if (s == NATS_OK) s = natsOptions_SetErrorHandler(opts_, on_async_error, violations_.get());
  if (s != NATS_OK) fail("setting up the connection", s, {});
  set_credentials(credentials);
  // Every server is tried once; the whole list again until the timeout. A
  // refusal (credentials, TLS) is final at once.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_);
  bool probed = false;
  while ((s = natsConnection_Connect(&nc_, opts_)) != NATS_OK) {
    if (std::chrono::steady_clock::now() >= deadline || (s != NATS_NO_SERVER && !transient(s)))
      connect_failed(s);
    // Something answered but no NATS INFO came: say what, at once, when every
    // server is such a thing (a monitoring port, a web server).
    if (!probed && (s == NATS_TIMEOUT || s == NATS_NO_SERVER)) {
      probed = true;
      std::vector<std::string> answers;
      for (const auto& server : location_.servers)
        if (std::string line = probe(server); !line.empty() && line.compare(0, 4, "INFO") != 0)
          answers.push_back(fmt::format("{} answered '{}'", server, line));
      if (!answers.empty() && answers.size() == location_.servers.size())
        throw Error(ErrorKind::Busy,
                    fmt::format("not a NATS server: {}{}", fmt::join(answers, ", "),
                                answers[0].find("HTTP/") != std::string::npos
                                    ? " (an HTTP server: the monitoring port?)"
                                    : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = std::min<Millis>(timeout_, 2000);
  jo.PublishAsync.MaxPending = 256;
  jo.PublishAsync.AckHandler = [](jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae,
                                  void* closure) {
    auto* self = static_cast<Client*>(closure);
    if (self->on_pub_ack)
      self->on_pub_ack(msg, pa, pae);
    else
      natsMsg_Destroy(msg);
  };
  jo.PublishAsync.AckHandlerClosure = this;
  if ((s = natsConnection_JetStream(&js_, nc_, &jo)) != NATS_OK) fail("JetStream", s, {});
}

void Client::connect_failed(natsStatus s) const {
  std::string servers = fmt::format("{}", fmt::join(location_.servers, ","));
  std::string text = last_error_text();
  if (s == NATS_CONNECTION_AUTH_FAILED || contains_nocase(text, "authorization violation"))
    throw Error(
        ErrorKind::Permission,
        fmt::format("{}: authorization violation: the servers refused {}", servers, login_));
  if (s == NATS_SECURE_CONNECTION_WANTED)
    throw Error(ErrorKind::Permission,
                fmt::format("{}: TLS: the location is tls:// but the server does not offer TLS "
                            "(use nats://, or enable TLS on the server)",
                            servers));
  if (s == NATS_SECURE_CONNECTION_REQUIRED)
    throw Error(ErrorKind::Permission,
                fmt::format("{}: TLS: the server requires TLS ({})", servers, text));
  if (s == NATS_SSL_ERROR || contains_nocase(text, "ssl") || contains_nocase(text, "certificate"))
    throw Error(ErrorKind::Permission,
                fmt::format("{}: TLS handshake failed: {} (is the server's certificate signed by "
                            "a CA in NATS_CA? does the server want a client certificate, "
                            "NATS_CERT and NATS_KEY?)",
                            servers, text));
  // A TLS server that verifies clients closes the connection after the
  // handshake (TLS 1.3) when it got no certificate it trusts.
  if (contains_nocase(text, "got ''"))
    throw Error(ErrorKind::Permission,
                fmt::format("{}: TLS: the server closed the connection while q logged in (does "
                            "it want a client certificate, NATS_CERT and NATS_KEY, signed by its "
                            "CA?): {}",
                            servers, text));
  if (s == NATS_PROTOCOL_ERROR)
    throw Error(ErrorKind::Busy, fmt::format("{}: not a NATS server: {}", servers, text));
  throw Error(ErrorKind::Busy, fmt::format("{}: no NATS server answered within {}: {}", servers,
                                           format_duration(timeout_), text));
}

std::string Client::permission_violation() const {
  std::lock_guard<std::mutex> lock(violations_->mu);
  return violations_->last;
}

Client::~Client() {
  if (kv_) kvStore_Destroy(kv_);
  if (js_) jsCtx_Destroy(js_);
  if (nc_) natsConnection_Destroy(nc_);
  if (opts_) natsOptions_Destroy(opts_);
}

int Client::cluster_size() const {
  char** servers = nullptr;
  int count = 0;
  if (natsConnection_GetServers(nc_, &servers, &count) != NATS_OK) return 1;
  for (int i = 0; i < count; ++i) free(servers[i]);
  free(servers);
  return std::max(count, 1);
}

void Client::fail(const std::string& what, natsStatus s, jsErrCode code) const {
  std::string where = fmt::format("nats://{}", location_.ns);
  if (std::string refused = violations_ ? permission_violation() : std::string(); !refused.empty())
    throw Error(ErrorKind::Permission,
                fmt::format("{}: {}: refused by the server: {} (the user's permissions must "
                            "allow q's subjects: README, \"On a NATS JetStream cluster\")",
                            where, what, refused));
  if (s == NATS_NOT_PERMITTED)
    throw Error(ErrorKind::Permission,
                fmt::format("{}: {}: refused by the server: {}", where, what, last_error_text()));
  if (transient(s, code))
    throw Error(ErrorKind::Busy,
                fmt::format("{}: {}: the cluster did not answer within {} ({})", where, what,
                            format_duration(timeout_), last_error_text()));
  throw Error(ErrorKind::Io,
              fmt::format("{}: {}: {}{}", where, what, last_error_text(),
                          code ? fmt::format(" (JetStream error {})", static_cast<int>(code))
                               : std::string()));
}

natsStatus Client::retry(const std::string& what, const std::function<natsStatus(jsErrCode*)>& call,
                         jsErrCode* code) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_);
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    jsErrCode err = static_cast<jsErrCode>(0);
    natsStatus s = call(&err);
    if (code) *code = err;
    if (!transient(s, err)) return s;
    // A refused subject only times out: the refusal came on the side.
    if (std::chrono::steady_clock::now() + pause >= deadline || !permission_violation().empty())
      fail(what, s, err);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

void Client::request(const std::string& subject, const std::string& data) {
  natsStatus s = retry("acknowledging a delivery", [&](jsErrCode*) {
    natsMsg* reply = nullptr;
    natsStatus st = natsConnection_Request(&reply, nc_, subject.c_str(), data.data(),
                                           static_cast<int>(data.size()), 2000);
    natsMsg_Destroy(reply);
    return st;
  });
  if (s != NATS_OK) fail("acknowledging a delivery", s, {});
}

std::optional<jsStreamState> Client::stream_state(const std::string& stream,
                                                  const std::string& what) {
  jsStreamState state{};
  jsErrCode code{};
  natsStatus s = retry(
      what,
      [&](jsErrCode* err) {
        jsStreamInfo* si = nullptr;
        natsStatus st = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, err);
        if (st == NATS_OK) {
          state = si->State;
          state.Subjects = nullptr;
          state.Deleted = nullptr;
          state.Lost = nullptr;
        }
        jsStreamInfo_Destroy(si);
        return st;
      },
      &code);
  if (s == NATS_NOT_FOUND || code == kStreamNotFound) return std::nullopt;
  if (s != NATS_OK) fail(what, s, code);
  return state;
}

void Client::open_bucket(const std::string& bucket, int replicas) {
  bucket_ = bucket;
  bucket_stream_ = "KV_" + bucket;
  jsErrCode code{};
  natsStatus s = retry(
      "reading the bucket " + bucket,
      [&](jsErrCode* err) {
        jsStreamInfo* si = nullptr;
        natsStatus st = js_GetStreamInfo(&si, js_, bucket_stream_.c_str(), nullptr, err);
        jsStreamInfo_Destroy(si);
        return st;
      },
      &code);
  if (s == NATS_NOT_FOUND || code == kStreamNotFound) {
    // Shaped like a KV bucket of history 1 (readable with `nats kv`), but
    // without deny_delete: a record q is done with is removed outright,
    // leaving no delete marker behind.
    std::string subjects = "$KV." + bucket + ".>";
    const char* subject_list[] = {subjects.c_str()};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = bucket_stream_.c_str();
    cfg.Subjects = subject_list;
    cfg.SubjectsLen = 1;
    cfg.MaxMsgsPerSubject = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = replicas;
    cfg.AllowRollup = true;
    cfg.AllowDirect = false;
    cfg.Discard = js_DiscardNew;
    s = retry(
        "creating the bucket " + bucket,
        [&](jsErrCode* err) {
          jsStreamInfo* si = nullptr;
          natsStatus st = js_AddStream(&si, js_, &cfg, nullptr, err);
          jsStreamInfo_Destroy(si);
          return st;
        },
        &code);
  }
  if (s != NATS_OK) fail("opening the bucket " + bucket, s, code);
}

std::optional<Record> Client::get(const std::string& key) {
  auto dated = get_dated(key);
  if (!dated) return std::nullopt;
  return std::move(dated->record);
}

std::optional<Client::Dated> Client::get_dated(const std::string& key) {
  natsMsg* raw = nullptr;
  jsErrCode code{};
  std::string subj = subject(key);
  natsStatus s = retry(
      "reading " + key,
      [&](jsErrCode* err) {
        natsMsg_Destroy(raw);
        raw = nullptr;
        return js_GetLastMsg(&raw, js_, bucket_stream_.c_str(), subj.c_str(), nullptr, err);
      },
      &code);
  MsgPtr msg(raw);
  if (s == NATS_NOT_FOUND || code == kNoMessageFound) return std::nullopt;
  if (s != NATS_OK) fail("reading " + key, s, code);
  return Dated{Record{std::string(natsMsg_GetData(msg.get()),
                                  static_cast<std::size_t>(natsMsg_GetDataLength(msg.get()))),
                      natsMsg_GetSequence(msg.get())},
               static_cast<Millis>(natsMsg_GetTime(msg.get()) / 1000000)};
}

// nats-server 2.9.10 checks a clustered stream's expected last subject
// sequence only before proposing a write, against what it has applied
// (stream.go: at apply only when not clustered or when the expected sequence
// is 0; nats-server #4320). Two writers expecting the same revision can both
// be stored: two leases for one delivery, an ack and a redelivery both
// accepted (seen in test_nats_storm, the FIFO storm and a shared rate).
// "No record yet" (expected 0) is checked at apply, so it is exact. A write
// over revision R therefore first creates the record `cas.R` (revisions are
// unique in the bucket, so R names it alone): one writer wins that create,
// only the winner writes, and removes its claim after. A later writer that
// read R cannot slip in once the winner's write is acknowledged (the leader
// has applied it, and its pre-check sees the new revision).
//
// A claim left by a process that died between its claim and its write would
// block the record for good, so a claim older than kStaleClaim is removed by
// the next writer, who then reads again. Its age is the cluster's: the
// claim's own timestamp (the leader stamps every stored message) against a
// probe record written now, never a client's wall clock (a client 30 s ahead
// judged live claims dead and two writers won: issue 25). A live claim lasts
// one round trip; a writer that meets one waits (up to the timeout) for it to
// clear or to go stale, watching the same claim record; only its own
// steady clock measures how long to wait, and only between the cluster's
// readings.
std::optional<std::uint64_t> Client::put_if(const std::string& key, const std::string& value,
                                            std::uint64_t expected, OnClaim on_claim) {
  if (expected == 0) return publish_if(key, value, 0);
  std::string claim_key = fmt::format("cas.{}", expected);
  static const std::string who = [] {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    return fmt::format("\"p\":{},\"h\":\"{}\"", static_cast<long>(getpid()), host);
  }();
  std::string claim_value = fmt::format("{{{},\"w\":\"{}\"}}", who, random_token());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_);
  std::optional<std::uint64_t> claim;
  auto pause = std::chrono::milliseconds(5);
  while (!(claim = publish_if(claim_key, claim_value, 0))) {
    auto held = get_dated(claim_key);
    if (!held) return std::nullopt;  // it cleared: the caller reads again
    Millis age = server_now() - held->written_at;
    if (age > kStaleClaim) {
      remove(held->record.revision);
      return std::nullopt;
    }
    if (on_claim == OnClaim::Pass) return std::nullopt;
    // Watch this claim until it clears or the cluster's clock says it is stale.
    auto stale_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(kStaleClaim - age);
    for (;;) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        const std::string& v = held->record.value;
        auto pid_at = v.find("\"p\":"), host_at = v.find("\"h\":\"");
        std::string holder =
            pid_at == std::string::npos
                ? std::string("another q process")
                : fmt::format(
                      "q process {}{}", std::strtoll(v.c_str() + pid_at + 4, nullptr, 10),
                      host_at == std::string::npos
                          ? std::string()
                          : " on " + v.substr(host_at + 5, v.find('"', host_at + 5) - host_at - 5));
        throw Error(ErrorKind::Busy,
                    fmt::format("nats://{}: writing {}: {} holds its claim {} (taken at {} by the "
                                "cluster's clock, {} ago; a claim is judged dead after {}); "
                                "waited {}, try again",
                                location_.ns, key, holder, claim_key, format_time(held->written_at),
                                format_duration(std::max<Millis>(age, 0)),
                                format_duration(kStaleClaim), format_duration(timeout_)));
      }
      auto wake = std::min({now + pause, stale_at, deadline});
      std::this_thread::sleep_until(wake);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
      auto again = get(claim_key);
      if (!again || again->revision != held->record.revision) break;  // cleared (or anew)
      if (std::chrono::steady_clock::now() >= stale_at) break;        // judge it again
    }
    if (auto again = get(claim_key); !again || again->revision != held->record.revision)
      return std::nullopt;
  }
  kill_point("cas-claimed");
  std::optional<std::uint64_t> rev;
  try {
    rev = publish_if(key, value, expected);
  } catch (...) {
    try {
      remove(*claim);
    } catch (...) {  // a claim left behind goes stale (above)
    }
    throw;
  }
  kill_point("cas-written");
  remove(*claim);
  return rev;
}

Millis Client::server_now() {
  std::string subj = subject("clock");
  std::string token = random_token();
  jsErrCode code{};
  natsStatus s = retry(
      "reading the cluster's clock",
      [&](jsErrCode* err) {
        jsPubAck* pa = nullptr;
        natsStatus st = js_Publish(&pa, js_, subj.c_str(), token.data(),
                                   static_cast<int>(token.size()), nullptr, err);
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s != NATS_OK) fail("reading the cluster's clock", s, code);
  // The newest probe: ours, or one written after it.
  auto probe = get_dated("clock");
  if (!probe) fail("reading the cluster's clock", NATS_NOT_FOUND, {});
  return probe->written_at;
}

std::optional<std::uint64_t> Client::publish_if(const std::string& key, const std::string& value,
                                                std::uint64_t expected) {
  std::string subj = subject(key);
  natsMsg* raw = nullptr;
  natsStatus s =
      natsMsg_Create(&raw, subj.c_str(), nullptr, value.data(), static_cast<int>(value.size()));
  MsgPtr msg(raw);
  if (s != NATS_OK) fail("writing " + key, s, {});
  jsPubOptions po;
  jsPubOptions_Init(&po);
  if (expected == 0)
    po.ExpectNoMessage = true;
  else
    po.ExpectLastSubjectSeq = expected;
  int attempts = 0;
  std::uint64_t revision = 0;
  jsErrCode code{};
  s = retry(
      "writing " + key,
      [&](jsErrCode* err) {
        ++attempts;
        jsPubAck* pa = nullptr;
        natsStatus st = js_PublishMsg(&pa, js_, msg.get(), &po, err);
        if (st == NATS_OK) revision = pa->Sequence;
        jsPubAck_Destroy(pa);
        return st;
      },
      &code);
  if (s == NATS_OK) return revision;
  if (code == kWrongLastSequence) {
    // A retried write may have been stored the first time: then the record
    // holds this very value (unique by its token).
    if (attempts > 1)
      if (auto now = get(key); now && now->value == value) return now->revision;
    return std::nullopt;
  }
  fail("writing " + key, s, code);
}

void Client::remove(std::uint64_t revision) {
  jsErrCode code{};
  natsStatus s = retry(
      "removing a record",
      [&](jsErrCode* err) {
        return js_DeleteMsg(js_, bucket_stream_.c_str(), revision, nullptr, err);
      },
      &code);
  // Gone already: replaced by a newer record of its key, or removed by a retry.
  // (10057: no message of that sequence; 10043: "sequence N not found", as a
  // stream's leader answers while another delete of it is under way.)
  if (s != NATS_OK && s != NATS_NOT_FOUND && code != static_cast<jsErrCode>(10057) &&
      code != static_cast<jsErrCode>(10043))
    fail("removing a record", s, code);
}

void Client::each(const std::string& filter,
                  const std::function<void(const std::string&, const Record&)>& each) {
  kvWatchOptions wo;
  kvWatchOptions_Init(&wo);
  wo.IgnoreDeletes = true;
  // The KV handle costs a round trip, and only listing needs it.
  // The bucket is there (open_bucket): "not found" from the KV calls means
  // the cluster cannot answer (2 of 3 nodes down: "no stream matches
  // subject"), so it is waited out as the other calls' errors are.
  auto unanswered = [](natsStatus st) {
    if (st == NATS_NOT_FOUND ||
        (st == NATS_ERR &&
         last_error_text().find("no stream matches subject") != std::string::npos))
      return NATS_TIMEOUT;
    return st;
  };
  if (!kv_) {
    natsStatus s = retry("opening the bucket " + bucket_, [&](jsErrCode*) {
      return unanswered(js_KeyValue(&kv_, js_, bucket_.c_str()));
    });
    if (s != NATS_OK) fail("opening the bucket " + bucket_, s, {});
  }
  kvWatcher* watcher = nullptr;
  natsStatus s = retry("listing " + filter, [&](jsErrCode*) {
    return unanswered(kvStore_Watch(&watcher, kv_, filter.c_str(), &wo));
  });
  if (s != NATS_OK) fail("listing " + filter, s, {});
  std::unique_ptr<kvWatcher, Deleter<kvWatcher, kvWatcher_Destroy>> hold(watcher);
  for (;;) {
    kvEntry* entry = nullptr;
    s = kvWatcher_Next(&entry, watcher, timeout_);
    if (s != NATS_OK) fail("listing " + filter, s, {});
    if (!entry) return;  // every record present when the watch began was seen
    std::unique_ptr<kvEntry, Deleter<kvEntry, kvEntry_Destroy>> e(entry);
    Record r{std::string(static_cast<const char*>(kvEntry_Value(entry)),
                         static_cast<std::size_t>(kvEntry_ValueLen(entry))),
             kvEntry_Revision(entry)};
    each(kvEntry_Key(entry), r);
  }
}

void Client::purge(const std::string& filter) {
  std::string subj = subject(filter);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Purge.Subject = subj.c_str();
  jsErrCode code{};
  natsStatus s = retry(
      "removing " + filter,
      [&](jsErrCode* err) { return js_PurgeStream(js_, bucket_stream_.c_str(), &jo, err); }, &code);
  if (s != NATS_OK) fail("removing " + filter, s, code);
}

}  // namespace q::nats
