#include "libq/nats/holders.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "libq/clock.hpp"
#include "libq/holder.hpp"
#include "libq/nats/dead.hpp"
#include "libq/nats/history.hpp"
#include "libq/nats/records.hpp"
#include "libq/sha256.hpp"

extern char** environ;

namespace q::nats {
namespace {

using json = nlohmann::json;

// A ping answered within this is a live helper; one that times out a
// stopped one (alive). "No responders" comes back at once.
constexpr int kPingTimeout = 250;
// A stopped holder is pinged again only after this (each ping costs its timeout).
constexpr Millis kStoppedFor = 1000;

std::string subject_of(const Client& client, const std::string& token) {
  return "qh." + client.location().ns + "." + token;
}

std::string holder_prefix(const std::string& queue) { return "holder." + encode_name(queue) + "."; }

void on_ping(natsConnection* nc, natsSubscription*, natsMsg* msg, void*) {
  if (const char* reply = natsMsg_GetReply(msg)) natsConnection_Publish(nc, reply, "", 0);
  natsMsg_Destroy(msg);
}

void say(int fd, const std::string& line) {
  std::string text = line + "\n";
  [[maybe_unused]] auto n = ::write(fd, text.data(), text.size());
}

}  // namespace

std::string holder_token(const Holder& holder) {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return sha256_hex(
             fmt::format("{}:{}:{}:{}", boot, holder.pid, holder.start_time, holder.pid_namespace))
      .substr(0, 32);
}

HolderBook::Ping HolderBook::ping(const std::string& token) {
  std::string subject = subject_of(client_, token);
  for (int attempt = 0;; ++attempt) {
    natsMsg* reply = nullptr;
    natsStatus s =
        natsConnection_Request(&reply, client_.nc(), subject.c_str(), "", 0, kPingTimeout);
    natsMsg_Destroy(reply);
    if (s == NATS_OK) return Ping::Alive;
    if (s != NATS_NO_RESPONDERS) return Ping::Stopped;  // a timeout, or not known: alive
    // No subscription anywhere in the cluster: its connection closed. Asked
    // once more a moment later (a subscription on its way to this server).
    if (attempt == 1) return Ping::Dead;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
}

std::string HolderBook::announce(const Holder& holder, bool descendants,
                                 const std::string& location) {
  std::string token = holder_token(holder);
  // A shell loop's earlier `receive --holder $$` started its helper already.
  if (!descendants && ping(token) != Ping::Dead) return token;
  int ready[2], watch[2] = {-1, -1};
  if (::pipe2(ready, O_CLOEXEC) != 0 || (descendants && ::pipe2(watch, O_CLOEXEC) != 0))
    throw Error(ErrorKind::Io, "starting the holder of this process's leases: no pipe");
  // Everything the child needs is made before fork (it may only exec). For
  // q work the pipe alone tells (its commands may outlive it): no pid.
  std::vector<std::string> args = {"q-nats",
                                   "--q-nats-holder",
                                   token,
                                   descendants ? "0" : std::to_string(holder.pid),
                                   std::to_string(holder.start_time),
                                   std::to_string(holder.pid_namespace),
                                   descendants ? "4" : "-1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string location_env = "Q_NATS_HOLDER_LOCATION=" + location;
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind("Q_NATS_HOLDER_LOCATION=", 0) != 0) envp.push_back(*e);
  envp.push_back(location_env.data());
  envp.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) throw Error(ErrorKind::Io, "starting the holder of this process's leases: fork");
  if (child == 0) {
    // Detached (its own session, not this process's child): it outlives us.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    // Its fds: /dev/null, the ready pipe as 3, the watched pipe as 4, no other.
    int r = ::fcntl(ready[1], F_DUPFD_CLOEXEC, 10);
    int w = descendants ? ::fcntl(watch[0], F_DUPFD_CLOEXEC, 10) : -1;
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (r < 0 || null < 0 || (descendants && w < 0)) ::_exit(70);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    if (::dup2(r, 3) < 0 || (descendants && ::dup2(w, 4) < 0)) ::_exit(70);
    ::syscall(SYS_close_range, descendants ? 5u : 4u, ~0u, 0u);
    if (::chdir("/") != 0) ::_exit(70);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    ::_exit(70);
  }
  ::waitpid(child, nullptr, 0);
  ::close(ready[1]);
  if (descendants) ::close(watch[0]);
  // Its first line: "ok" once it answers pings, or why it could not.
  std::string line;
  pollfd p{ready[0], POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
  }
  ::close(ready[0]);
  if (auto nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
  if (line != "ok") {
    if (descendants) ::close(watch[1]);
    bool refused = line.rfind("refused: ", 0) == 0;
    throw Error(refused ? ErrorKind::Permission : ErrorKind::Busy,
                "starting the holder of this process's leases on the cluster: " +
                    (line.empty() ? std::string("it did not start")
                     : refused    ? line.substr(9)
                                  : line));
  }
  // Inherited by every command q work starts, and what they start.
  if (descendants) ::fcntl(watch[1], F_SETFD, 0);
  return token;
}

void HolderBook::record(const std::string& queue, const std::string& token) {
  if (!recorded_.insert(queue + '\n' + token).second) return;
  std::string key = holder_prefix(queue) + token;
  if (client_.get(key)) return;
  client_.put_if(key, json{{"since", clock_.now()}, {"w", random_token()}}.dump(), 0);
}

HolderBook::Checked HolderBook::check(const std::string& queue, const std::string& own,
                                      bool force) {
  Millis now = clock_.now();
  Last& last = last_[queue];
  if (!force && last.at != 0 && now >= last.at && now - last.at < kCheckEvery)
    return {0, last.result.others, false};
  last.at = now;
  // The holders' keys: one stream info with a subjects filter, no listing.
  std::string prefix = "$KV." + client_.bucket_stream().substr(3) + "." + holder_prefix(queue);
  std::vector<std::string> tokens;
  for (const auto& subject : subjects(prefix + "*", "reading the holders of queue " + queue))
    tokens.push_back(subject.substr(prefix.size()));
  Checked result;
  std::set<std::string> seen(tokens.begin(), tokens.end());
  for (const auto& token : last.tokens)
    if (!seen.count(token)) result.died = true;
  last.tokens = std::move(seen);
  for (const auto& token : tokens) {
    if (token == own) continue;
    if (auto st = stopped_.find(token); st != stopped_.end() && now - st->second < kStoppedFor) {
      result.others = true;
      continue;
    }
    switch (ping(token)) {
      case Ping::Alive:
        stopped_.erase(token);
        result.others = true;
        break;
      case Ping::Stopped:
        stopped_[token] = now;
        result.others = true;
        break;
      case Ping::Dead:
        stopped_.erase(token);
        result.died = true;
        result.released += release(queue, token);
        break;
    }
  }
  last.result = result;
  return result;
}

std::vector<std::string> HolderBook::subjects(const std::string& filter, const std::string& what) {
  std::vector<std::string> found;
  jsErrCode code{};
  natsStatus s = client_.retry(
      what,
      [&](jsErrCode* err) {
        found.clear();
        jsOptions o;
        jsOptions_Init(&o);
        o.Stream.Info.SubjectsFilter = filter.c_str();
        jsStreamInfo* si = nullptr;
        natsStatus st =
            js_GetStreamInfo(&si, client_.js(), client_.bucket_stream().c_str(), &o, err);
        if (st == NATS_OK && si->State.Subjects)
          for (int i = 0; i < si->State.Subjects->Count; ++i)
            found.emplace_back(si->State.Subjects->List[i].Subject);
        jsStreamInfo_Destroy(si);
        return st;
      },
      &code);
  if (s != NATS_OK) client_.fail(what, s, code);
  return found;
}

std::size_t HolderBook::release_everywhere(const std::string& token) {
  std::string prefix = "$KV." + client_.bucket_stream().substr(3) + ".holder.";
  std::size_t released = 0;
  for (const auto& subject :
       subjects(prefix + "*." + token, "reading the records of holder " + token)) {
    std::string enc =
        subject.substr(prefix.size(), subject.size() - prefix.size() - token.size() - 1);
    if (auto queue = decode_name(enc)) released += release(*queue, token);
  }
  return released;
}

std::size_t HolderBook::release(const std::string& queue, const std::string& token) {
  struct Held {
    std::string key;
    Lease lease;
    std::uint64_t revision;
  };
  std::vector<Held> held;
  auto keep = [&](const std::string& key, const Record& r) {
    Lease l = Lease::decode(r.value);
    if (l.state == Lease::Leased && l.holder == token) held.push_back({key, l, r.revision});
  };
  // The lease keys by one stream info (a KV listing creates a consumer: some
  // 150 ms on a loaded cluster), then one read each; a listing past 256.
  std::string bucket = "$KV." + client_.bucket_stream().substr(3) + ".";
  auto keys =
      subjects(bucket + Names::lease_prefix(queue) + "*", "reading the leases of queue " + queue);
  if (keys.size() > 256) {
    client_.each(Names::lease_prefix(queue) + "*", keep);
  } else {
    for (const auto& subject : keys) {
      std::string key = subject.substr(bucket.size());
      if (auto r = client_.get(key)) keep(key, *r);
    }
  }
  std::size_t released = 0;
  for (auto& h : held) {
    // As a nack without delay, by CAS: of two that find the holder dead,
    // one releases; a lease acked or taken again since is left alone.
    Lease next = h.lease;
    next.state = Lease::Released;
    next.until = clock_.now();
    next.reason = kHolderDied;
    next.holder.clear();
    add_attempt(next.history, leases_.ended(h.lease, AttemptEnd::Released, kHolderDied));
    if (!client_.put_if(h.key, next.encode(), h.revision, Client::OnClaim::Pass)) continue;
    leases_.rearm(h.lease.reply, 0);  // -NAK: JetStream delivers it now
    ++released;
  }
  // Forgotten once its leases are released; a lease written meanwhile (it
  // was not dead after all) names it again only with its next record.
  if (auto rec = client_.get(holder_prefix(queue) + token)) client_.remove(rec->revision);
  recorded_.erase(queue + '\n' + token);
  return released;
}

void HolderBook::forget(const std::string& queue) { client_.purge(holder_prefix(queue) + "*"); }

int run_nats_holder(const NatsOpenOptions& options, const std::string& token, const Holder& holder,
                    int watch_fd, int ready_fd) {
  // A terminal's ^C or hang-up is not this process's end: what it stands for is.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGHUP, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  const std::uint32_t pid = holder.pid;
  int pidfd = -1;
  if (pid != 0) {
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
    // The pid named the process checked by the caller; still it?
    if (!holder_alive(holder)) {
      say(ready_fd, fmt::format("process {} has exited", pid));
      return 1;
    }
  }
  try {
    Client client(parse_location(options.location), options.credentials, options.timeout);
    natsSubscription* raw = nullptr;
    std::string subject = subject_of(client, token);
    natsStatus s = natsConnection_Subscribe(&raw, client.nc(), subject.c_str(), on_ping, nullptr);
    SubPtr sub(raw);
    if (s == NATS_OK) s = natsConnection_Flush(client.nc());
    if (s != NATS_OK) {
      say(ready_fd, fmt::format("subscribing to {}: {}", subject, natsStatus_GetText(s)));
      return 69;
    }
    // A subscription the user's permissions refuse is refused quietly, and
    // every ping would then say "dead": ask itself first.
    natsMsg* echo = nullptr;
    s = natsConnection_Request(&echo, client.nc(), subject.c_str(), "", 0, 5000);
    natsMsg_Destroy(echo);
    if (s != NATS_OK) {
      say(ready_fd,
          fmt::format("refused: {} does not answer its own ping ({}): may the user subscribe "
                      "and publish to qh.{}.> (README, permissions)?",
                      subject, natsStatus_GetText(s), client.location().ns));
      return 77;
    }
    // Ready to release what the holder holds the moment it ends (below).
    const std::string& ns = client.location().ns;
    client.open_bucket("q_" + ns, std::min(3, client.cluster_size()));
    Names names{ns};
    SystemClock clock;
    const int replicas = std::min(3, client.cluster_size());
    DeadLetters dead(client, names, clock, replicas);
    Workers workers(client);
    LeaseBook leases(client, clock, dead);
    leases.use_workers(&workers);
    HolderBook book(client, clock, leases);
    say(ready_fd, "ok");
    ::close(ready_fd);
    for (;;) {
      std::vector<pollfd> fds;
      if (pidfd >= 0) fds.push_back({pidfd, POLLIN, 0});
      if (watch_fd >= 0) fds.push_back({watch_fd, POLLIN, 0});
      int n = ::poll(fds.data(), fds.size(), pidfd < 0 && pid != 0 ? 100 : -1);
      if (n < 0 && errno != EINTR) break;
      if (pid != 0 && pidfd < 0 && !holder_alive(holder)) break;  // no pidfd: polled
      bool ended = false;
      for (auto& f : fds) {
        if (!f.revents) continue;
        if (f.fd == pidfd) ended = true;
        char buf[64];
        if (f.fd == watch_fd && ::read(watch_fd, buf, sizeof buf) <= 0) ended = true;
      }
      if (ended) break;
    }
    // What it stood for has ended: its messages go back now, by this very
    // helper (a ping of it gets "no responders" after this, the fallback
    // when the helper itself is killed or its host lost).
    natsSubscription_Unsubscribe(sub.get());
    book.release_everywhere(token);
  } catch (const Error& e) {
    say(ready_fd, e.what());
    return 69;
  }
  return 0;
}

}  // namespace q::nats
