// Holders on a cluster (issue 23, parity with the file's issue 14): a `q work`
// or a `q receive --holder PID` names a holder of the leases it takes, and
// once that holder is gone its messages are released at once (reason "holder
// died") instead of at the end of their visibility timeout.
//
// A holder is a live NATS connection: a small helper process (q-nats started
// again, detached) subscribes to qh.<NS>.<token> and answers every ping
// while what it stands for lives: the pid of `receive --holder PID` (a
// pidfd), or for q work a pipe whose write end q work and every command it
// starts hold (so a command that outlives a kill -9 of q work keeps its
// message, as on a file). The queue's holders are records
// holder.<Q>.<token> in the bucket; leases carry the token. Whoever looks for
// a delivery pings the holders of the queue: "no responders" (the server has
// no subscription: the helper's connection closed) means dead, and its
// leases are released by CAS, the JetStream message made deliverable with
// -NAK; a ping that times out (a stopped helper) counts as alive.
// ARCHITECTURE.md, "Holders on a cluster".
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "libq/broker.hpp"
#include "libq/nats/broker.hpp"
#include "libq/nats/client.hpp"
#include "libq/nats/leases.hpp"

namespace q::nats {

// The token of a holder: the same process (pid, start time, pid namespace,
// this boot of this host) always gets the same one, so a shell loop's many
// `receive --holder $$` share one helper.
std::string holder_token(const Holder& holder);

class HolderBook {
 public:
  HolderBook(Client& client, const Clock& clock, LeaseBook& leases)
      : client_(client), clock_(clock), leases_(leases) {}

  // Makes `holder` answer on the cluster: finds its helper (a ping answered)
  // or starts one that lives as long as the process (descendants false), or
  // as long as any process holding the write end of a pipe left open (not
  // close-on-exec) in this process (descendants true: q work). Returns the
  // token the leases carry. Error(Busy) when the helper could not start.
  std::string announce(const Holder& holder, bool descendants, const std::string& location);
  // The queue's record of `token`, written once per process and queue.
  void record(const std::string& queue, const std::string& token);

  struct Checked {
    std::size_t released = 0;  // leases of dead holders released now
    bool others = false;       // other live (or stopped) holders have records
    // A holder died since the last check: found dead now, or its record
    // gone (its helper released its messages): they are on their way back.
    bool died = false;
  };
  // Pings the holders of `queue` (but `own`) and releases the leases of the
  // dead ones. At most every kCheckEvery per queue in this process (else
  // the last answer); `force` checks now.
  Checked check(const std::string& queue, const std::string& own, bool force = false);
  static constexpr Millis kCheckEvery = 200;

  // Every holder record of `queue` (delete).
  void forget(const std::string& queue);
  // Releases what `token` holds in every queue of the namespace, and its
  // records: its helper, the moment the holder ends. Returns the count.
  std::size_t release_everywhere(const std::string& token);

 private:
  Client& client_;
  const Clock& clock_;
  LeaseBook& leases_;
  std::set<std::string> recorded_;  // queue + '\n' + token
  struct Last {
    Millis at = 0;
    Checked result;
    std::set<std::string> tokens;  // the holders seen
  };
  std::map<std::string, Last> last_;
  std::map<std::string, Millis> stopped_;  // token -> when a ping last timed out
  enum class Ping { Alive, Stopped, Dead };
  Ping ping(const std::string& token);
  std::size_t release(const std::string& queue, const std::string& token);
  // The bucket's subjects matching `filter` (one stream info, no listing).
  std::vector<std::string> subjects(const std::string& filter, const std::string& what);
};

// The helper's whole life (q-nats --q-nats-holder, cli/main_nats.cpp):
// connects, subscribes to the token's subject, writes one line to `ready_fd`
// ("ok", or the error) and answers pings until `holder` (pid 0: none) exits or
// `watch_fd` (when not -1) reads end of file. Returns the exit status.
int run_nats_holder(const NatsOpenOptions& options, const std::string& token, const Holder& holder,
                    int watch_fd, int ready_fd);

}  // namespace q::nats
