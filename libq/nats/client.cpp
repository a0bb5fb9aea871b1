#include "libq/nats/client.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "libq/nats/nkey.hpp"
#include "libq/nats/stage.hpp"
#include "libq/timefmt.hpp"

namespace q::nats {
namespace {

constexpr jsErrCode kClusterNotAvailable = static_cast<jsErrCode>(10008);

bool is_ns_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

}  // namespace

std::string last_error_text() {
  natsStatus s = NATS_OK;
  const char* text = nats_GetLastError(&s);
  if (text && *text) return text;
  return natsStatus_GetText(s);
}

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
  jo.PublishAsync.MaxPending = 4096;
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

namespace {
std::atomic<std::uint64_t> closed_requests{0};
}  // namespace

std::uint64_t messages_sent_by_closed_clients() { return closed_requests.load(); }

Client::~Client() {
  if (nc_) {
    // What this connection published (requests, publishes, acks): the
    // bench's requests per operation (Q_NATS_COUNT_REQUESTS, cli/main_nats.cpp).
    natsStatistics* stats = nullptr;
    std::uint64_t out = 0;
    if (natsStatistics_Create(&stats) == NATS_OK && natsConnection_GetStats(nc_, stats) == NATS_OK)
      natsStatistics_GetCounts(stats, nullptr, nullptr, &out, nullptr, nullptr);
    natsStatistics_Destroy(stats);
    closed_requests += out;
  }
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

MsgPtr Client::stored_message(const std::string& stream, std::uint64_t seq, const std::string& what,
                              bool missing_stream_ok) {
  natsMsg* raw = nullptr;
  jsErrCode code{};
  natsStatus s = retry(
      what,
      [&](jsErrCode* err) {
        natsMsg_Destroy(raw);
        raw = nullptr;
        return js_GetMsg(&raw, js(), stream.c_str(), seq, nullptr, err);
      },
      &code);
  MsgPtr msg(raw);
  if (s == NATS_NOT_FOUND || code == kNoMessageFound) return nullptr;
  if (missing_stream_ok && code == kStreamNotFound) return nullptr;
  if (s != NATS_OK) fail(what, s, code);
  return msg;
}

std::optional<nlohmann::json> Client::next_by_subject(const std::string& stream, std::uint64_t from,
                                                      const std::string& subject,
                                                      const std::string& what,
                                                      bool missing_stream_ok) {
  using json = nlohmann::json;
  std::string api = "$JS.API.STREAM.MSG.GET." + stream;
  std::string body =
      json{{"seq", std::max<std::uint64_t>(from, 1)}, {"next_by_subj", subject}}.dump();
  std::optional<json> found;
  jsErrCode code{};
  natsStatus s = retry(
      what,
      [&](jsErrCode* err) {
        found.reset();
        natsMsg* raw = nullptr;
        natsStatus st = natsConnection_Request(&raw, nc(), api.c_str(), body.data(),
                                               static_cast<int>(body.size()), 2000);
        MsgPtr reply(raw);
        if (st != NATS_OK) return st;
        json j = json::parse(natsMsg_GetData(reply.get()),
                             natsMsg_GetData(reply.get()) + natsMsg_GetDataLength(reply.get()),
                             nullptr, false);
        if (j.is_discarded() || !j.is_object()) return NATS_PROTOCOL_ERROR;
        if (auto e = j.find("error"); e != j.end()) {
          auto ec = static_cast<jsErrCode>(e->value("err_code", 0));
          if (ec == kNoMessageFound || (missing_stream_ok && ec == kStreamNotFound)) return NATS_OK;
          *err = ec;
          return NATS_ERR;
        }
        auto m = j.find("message");
        if (m == j.end() || !m->is_object()) return NATS_PROTOCOL_ERROR;
        found = *m;
        return NATS_OK;
      },
      &code);
  if (s != NATS_OK) fail(what, s, code);
  return found;
}

}  // namespace q::nats
