#include "cli/serve/server.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "cli/serve/crypto.hpp"
#include "libq/error.hpp"
#include "cli/serve/service.hpp"
#include "cli/serve/sigv4.hpp"
#include "cli/serve/wire.hpp"

namespace serve {

namespace {

using nlohmann::json;

// Set on the thread that refuses a connection beyond the pool's bound.
thread_local bool refusing = false;

// cpp-httplib's pool takes every connection and queues it without bound; this
// one runs at most `threads` at once (a keep-alive connection holds its thread)
// and queues at most `queued` more. Beyond that a connection is answered at
// once with 503 on the refusing thread (its read bounded by the read timeout),
// and when even that one is busy, the accept loop waits: the kernel's backlog
// holds the rest.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(std::size_t threads, std::size_t queued) : max_queued_(queued) {
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(jobs_, false); });
    refuser_ = std::thread([this] { work(refused_, true); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (jobs_.size() < max_queued_ + idle_) {
      jobs_.push_back(std::move(fn));
      cond_.notify_all();
      return;
    }
    // Full: refuse, one at a time.
    space_.wait(lock, [&] { return refused_.empty() || shutdown_; });
    refused_.push_back(std::move(fn));
    cond_.notify_all();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    cond_.notify_all();
    space_.notify_all();
    for (auto& t : workers_) t.join();
    refuser_.join();
  }

 private:
  void work(std::deque<std::function<void()>>& from, bool refuse) {
    refusing = refuse;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!refuse) ++idle_;
        cond_.wait(lock, [&] { return !from.empty() || shutdown_; });
        if (!refuse) --idle_;
        if (from.empty()) return;
        fn = std::move(from.front());
        from.pop_front();
        space_.notify_all();
      }
      fn();
    }
  }
  std::size_t max_queued_;
  std::size_t idle_ = 0;
  bool shutdown_ = false;
  std::mutex mutex_;
  std::condition_variable cond_, space_;
  std::deque<std::function<void()>> jobs_, refused_;
  std::vector<std::thread> workers_;
  std::thread refuser_;
};

std::string request_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  std::uint64_t a = random(), b = random();
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xFFFF, a & 0xFFFF,
                     b >> 48, b & 0xFFFFFFFFFFFF);
}

// After a stop, the connections still open on the server's port (found in
// /proc/self/fd: cpp-httplib hands its handlers no socket).
void shut_connections(int port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = ::readdir(dir)) {
    int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == ::dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t n = sizeof local, m = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) != 0) continue;
    int local_port = -1;
    if (local.ss_family == AF_INET)
      local_port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    else if (local.ss_family == AF_INET6)
      local_port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    if (local_port != port) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &m) == 0) ::shutdown(fd, SHUT_RDWR);
  }
  ::closedir(dir);
}

// The whole-request read deadline. cpp-httplib's read timeout bounds each
// read, so a client sending a byte every few seconds held its connection (and
// a thread) for as long as it liked. Every 250 ms the watchdog looks at each
// connection on the port: once bytes of a request have arrived (the kernel's
// count of bytes received grew since the last reply) and the handler has not
// been reached within the read timeout, it answers 400 (plain HTTP; over TLS
// it only closes) and shuts the connection. Connections in a handler (a long
// poll) are left alone.
class ReadDeadline {
 public:
  // The handler's side, keyed by the client's address and port.
  void enter(const std::string& addr, int port) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& c = handlers_[{addr, port}];
    ++c.busy;
    ++c.entered;
  }
  void leave(const std::string& addr, int port) {
    std::lock_guard<std::mutex> lock(mutex_);
    --handlers_[{addr, port}].busy;
  }
  // One look at every connection on `port`; `now` is steady time.
  void check(int port, std::chrono::steady_clock::time_point now, std::chrono::seconds limit,
             bool tls) {
    DIR* dir = ::opendir("/proc/self/fd");
    if (!dir) return;
    std::map<std::pair<std::string, int>, Conn> seen;
    while (dirent* e = ::readdir(dir)) {
      int fd = std::atoi(e->d_name);
      if (fd <= 2 || fd == ::dirfd(dir)) continue;
      auto key = peer_on(fd, port);
      if (!key) continue;
      Info info{};
      socklen_t len = sizeof info;
      if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
          len < offsetof(Info, bytes_received) + sizeof info.bytes_received)
        continue;
      std::lock_guard<std::mutex> lock(mutex_);
      Conn c = conns_.count(*key) ? conns_[*key] : Conn{};
      const Handled& h = handlers_[*key];
      if (h.busy > 0 || h.entered != c.entered || info.bytes_acked != c.acked) {
        // In a handler, or a reply went out since: what arrived so far is
        // accounted for.
        c.entered = h.entered;
        c.acked = info.bytes_acked;
        c.received = info.bytes_received;
        c.started.reset();
      } else if (info.bytes_received > c.received && !c.started) {
        c.started = now;  // a request began
      }
      if (c.started && now - *c.started > limit) {
        static const char reply[] =
            "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        if (!tls) (void)::send(fd, reply, sizeof reply - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(fd, SHUT_RDWR);
        c.started.reset();
        c.received = info.bytes_received;
      }
      seen[*key] = c;
    }
    ::closedir(dir);
    std::lock_guard<std::mutex> lock(mutex_);
    conns_ = std::move(seen);
    for (auto it = handlers_.begin(); it != handlers_.end();)
      it = it->second.busy == 0 && !conns_.count(it->first) ? handlers_.erase(it) : std::next(it);
  }

 private:
  // The kernel's struct tcp_info up to tcpi_bytes_received (Linux 4.1);
  // glibc's ends before its byte counts.
  struct Info {
    tcp_info base;
    std::uint64_t pacing_rate, max_pacing_rate, bytes_acked, bytes_received;
  };
  struct Handled {
    int busy = 0;
    std::uint64_t entered = 0;
  };
  struct Conn {
    std::uint64_t entered = 0, acked = 0, received = 0;
    std::optional<std::chrono::steady_clock::time_point> started;
  };
  static std::optional<std::pair<std::string, int>> peer_on(int fd, int port) {
    sockaddr_storage local{}, peer{};
    socklen_t n = sizeof local, m = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) != 0) return std::nullopt;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &m) != 0) return std::nullopt;
    char text[INET6_ADDRSTRLEN] = "";
    if (local.ss_family == AF_INET && peer.ss_family == AF_INET) {
      if (ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port) != port) return std::nullopt;
      auto* p = reinterpret_cast<sockaddr_in*>(&peer);
      ::inet_ntop(AF_INET, &p->sin_addr, text, sizeof text);
      return std::pair<std::string, int>{text, ntohs(p->sin_port)};
    }
    if (local.ss_family == AF_INET6 && peer.ss_family == AF_INET6) {
      if (ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port) != port) return std::nullopt;
      auto* p = reinterpret_cast<sockaddr_in6*>(&peer);
      ::inet_ntop(AF_INET6, &p->sin6_addr, text, sizeof text);
      return std::pair<std::string, int>{text, ntohs(p->sin6_port)};
    }
    return std::nullopt;
  }
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, Handled> handlers_;
  std::map<std::pair<std::string, int>, Conn> conns_;
};

struct Handler {
  Service& service;
  const Credentials* credentials;  // null: --insecure-no-auth
  bool tls;
  std::atomic<int>& in_flight;  // requests being answered
  ReadDeadline& deadline;

  void operator()(const httplib::Request& req, httplib::Response& res) const {
    ++in_flight;
    deadline.enter(req.remote_addr, req.remote_port);
    struct Done {
      std::atomic<int>& n;
      ReadDeadline& deadline;
      const httplib::Request& req;
      ~Done() {
        deadline.leave(req.remote_addr, req.remote_port);
        --n;
      }
    } done{in_flight, deadline, req};
    std::string id = request_id();
    res.set_header("x-amzn-RequestId", id);
    std::string target = req.get_header_value("X-Amz-Target");
    bool json_protocol = !target.empty();
    std::string action;
    try {
      if (json_protocol) {
        const std::string prefix = "AmazonSQS.";
        if (target.compare(0, prefix.size(), prefix) != 0)
          throw SqsError(400, "InvalidAction", "UnknownOperationException",
                         "X-Amz-Target " + target + " is not AmazonSQS.ACTION");
        action = target.substr(prefix.size());
      }
      RequestInfo info;
      info.host = req.get_header_value("Host");
      if (info.host.empty()) info.host = "localhost";
      info.tls = tls;
      if (credentials) {
        SignedRequest signed_request{req.method, req.target, {}, req.body};
        for (const auto& [k, v] : req.headers) signed_request.headers.emplace_back(k, v);
        auto failure = verify(signed_request, *credentials, service.clock().now(), info.region);
        if (!failure.code.empty())
          throw SqsError(failure.status, failure.code, failure.code, failure.message);
      }
      json in;
      std::map<std::string, std::string> form;
      if (json_protocol) {
        in = req.body.empty() ? json::object() : json::parse(req.body, nullptr, false);
        if (!in.is_object())
          throw SqsError(400, "MalformedQueryString", "SerializationException",
                         "The request body is not a JSON object");
      } else {
        form = parse_form(req.body);
        for (const auto& [k, v] : req.params) form.emplace(k, v);
        action = form.count("Action") ? form["Action"] : "";
        if (action.empty())
          throw SqsError(400, "MissingAction", "MissingAction",
                         "The request needs an Action (query protocol) or X-Amz-Target (JSON)");
        in = query_to_json(action, form);
      }
      json out = service.call(action, in, info);
      if (json_protocol)
        // Replace, not throw: text from a request (an action name, a value
        // echoed in an error) may not be UTF-8; a reply is always sent.
        res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/x-amz-json-1.0");
      else
        res.set_content(xml_reply(action, out, id), "text/xml");
    } catch (const SqsError& e) {
      res.status = e.status;
      if (json_protocol) {
        res.set_header("x-amzn-query-error", e.code + (e.sender ? ";Sender" : ";Receiver"));
        res.set_content(json_error(e), "application/x-amz-json-1.0");
      } else {
        res.set_content(xml_error(e, id), "text/xml");
      }
    } catch (const std::exception& e) {
      SqsError internal(500, "InternalError", "InternalError", e.what(), false);
      res.status = 500;
      if (json_protocol) {
        res.set_header("x-amzn-query-error", "InternalError;Receiver");
        res.set_content(json_error(internal), "application/x-amz-json-1.0");
      } else {
        res.set_content(xml_error(internal, id), "text/xml");
      }
    }
  }
};

}  // namespace

int serve(const ServeOptions& o, std::unique_ptr<q::Broker> broker, const q::Clock& clock) {
  std::optional<Credentials> credentials;
  if (o.credentials) {
    credentials = read_credentials(*o.credentials);
  } else if (!is_loopback(o.host)) {
    throw q::Error(q::ErrorKind::Usage,
                   fmt::format("--insecure-no-auth: only on a loopback address, not {} (give "
                               "--credentials FILE)",
                               o.host));
  }
  if (o.tls_cert.has_value() != o.tls_key.has_value())
    throw q::Error(q::ErrorKind::Usage, "--tls-cert and --tls-key go together");

  auto watch = broker->watch();
  Service service(std::move(broker), clock);
  service.set_group_commit(o.group_commit);

  std::unique_ptr<httplib::Server> server;
  if (o.tls_cert) {
    auto tls = std::make_unique<httplib::SSLServer>(o.tls_cert->c_str(), o.tls_key->c_str());
    if (!tls->is_valid())
      throw q::Error(q::ErrorKind::Usage,
                     fmt::format("--tls-cert {} / --tls-key {}: not a certificate and its key "
                                 "(PEM)",
                                 *o.tls_cert, *o.tls_key));
    server = std::move(tls);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  // Replies go out in more than one write (headers, then body): with Nagle's
  // algorithm on, the second write waited for the client's delayed ACK, some
  // 40 ms per request on a keep-alive connection. And only SO_REUSEADDR, not
  // cpp-httplib's default SO_REUSEPORT too, which let a second q serve (of
  // any program of this user) bind the same port and take half the
  // connections instead of being told the port is in use.
  server->set_tcp_nodelay(true);
  int listen_fd = -1;
  server->set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  std::size_t threads = o.max_connections;
  server->new_task_queue = [threads] { return new BoundedPool(threads, 0); };
  server->set_payload_max_length(o.max_request);
  server->set_read_timeout(o.read_timeout, 0);
  server->set_write_timeout(o.read_timeout, 0);
  server->set_keep_alive_timeout(o.idle_timeout);
  server->set_keep_alive_max_count(100000);
  server->set_pre_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (!refusing) return httplib::Server::HandlerResponse::Unhandled;
    res.status = 503;
    res.set_header("Connection", "close");
    res.set_header("Retry-After", "1");
    res.set_content(
        "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Receiver</Type><Code>"
        "ServiceUnavailable</Code><Message>Too many connections: q serve is at "
        "--max-connections</Message></Error></ErrorResponse>",
        "text/xml");
    return httplib::Server::HandlerResponse::Handled;
  });
  std::atomic<int> in_flight{0};
  ReadDeadline deadline;
  Handler handler{service, credentials ? &*credentials : nullptr, o.tls_cert.has_value(), in_flight,
                  deadline};
  server->Post(".*", handler);
  server->Get(".*", handler);

  // Stop signals go to the thread that waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Port 0: any free port (the start-up line names it; tests use this).
  int port = o.port;
  if (port == 0) port = server->bind_to_any_port(o.host.c_str());
  if (port <= 0 || (o.port != 0 && !server->bind_to_port(o.host.c_str(), o.port)))
    throw q::Error(q::ErrorKind::Busy,
                   fmt::format("--listen {}:{}: cannot listen there (in use, or not an address "
                               "of this host)",
                               o.host, o.port));
  // cpp-httplib listens with a backlog of 5 (compiled into Debian's
  // libcpp-httplib): a burst of connects beyond it got resets. Listening again
  // on the bound socket only raises the backlog (the kernel caps it at
  // somaxconn); the pool's bound still decides what is served.
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);

  std::atomic<bool> done{false};
  std::thread waker([&] {
    // Another process's commit (q send on the file, a q serve on the
    // cluster) rings the doorbell: wake the long polls.
    int fd = watch ? watch->fd() : -1;
    while (!done) {
      if (fd < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 200) > 0) {
        watch->drain();
        service.notify();
      }
    }
  });
  std::thread watchdog([&] {
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      deadline.check(port, std::chrono::steady_clock::now(), std::chrono::seconds(o.read_timeout),
                     o.tls_cert.has_value());
    }
  });
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    if (done) return;
    auto [requests, commits] = service.group_commit_counts();
    std::cerr << fmt::format("q serve: stopping ({}); {} sends and deletes in {} commits{}\n",
                             sig == SIGINT ? "SIGINT" : "SIGTERM", requests, commits,
                             o.group_commit ? "" : " (--no-group-commit)");
    service.stop();  // long polls answer now, with what they have
    server->stop();  // no new connection
    // The requests in flight are answered (a bounded wait: a client slow to
    // read its reply is cut by the write timeout), then the idle connections go.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.read_timeout);
    while (in_flight > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // After a stop cpp-httplib looks at its stop flag only between requests,
    // once an idle keep-alive connection has waited out its timeout (30 s):
    // each client sees its idle connection closed, as HTTP allows.
    shut_connections(port);
  });

  std::cerr << fmt::format(
      "q serve: {} on {}://{}:{} ({} connections at most){}\n", o.location,
      o.tls_cert ? "https" : "http", o.host, port, o.max_connections,
      credentials ? fmt::format(", {} access key(s)", credentials->size()) : "");
  if (!credentials)
    std::cerr << "q serve: WARNING: --insecure-no-auth: any local process may use these queues "
                 "without a signature\n";
  bool ok = server->listen_after_bind();
  done = true;
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  waker.join();
  watchdog.join();
  return ok ? 0 : 74;
}

}  // namespace serve
