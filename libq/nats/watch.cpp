#include "libq/nats/watch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

namespace q::nats {
namespace {

// Readable when a message is published to a queue of the namespace or a
// lease or settings record changes (a resume wakes a paused q work): a core NATS subscription (no
// JetStream cost) whose handler writes a byte to a pipe.
class NatsWatch final : public ChangeWatch {
 public:
  NatsWatch(Client& client, const std::string& ns) {
    if (::pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0)
      throw Error(ErrorKind::Io, "watching for changes: pipe2 failed");
    for (const std::string& subj :
         {"q." + ns + ".>", "$KV." + client.bucket_stream().substr(3) + ".lease.>",
          "$KV." + client.bucket_stream().substr(3) + ".config.>"}) {
      natsSubscription* sub = nullptr;
      natsStatus s =
          natsConnection_Subscribe(&sub, client.nc(), subj.c_str(), &NatsWatch::on_msg, this);
      if (s != NATS_OK) client.fail("watching for changes", s, {});
      subs_.emplace_back(sub);
    }
  }
  ~NatsWatch() override {
    subs_.clear();  // unsubscribed before the pipe goes
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  int fd() const override { return pipe_[0]; }
  void drain() override {
    char buf[256];
    while (::read(pipe_[0], buf, sizeof buf) > 0) {
    }
  }

 private:
  int pipe_[2] = {-1, -1};
  std::vector<SubPtr> subs_;
  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* self) {
    natsMsg_Destroy(msg);
    char x = 1;
    (void)!::write(static_cast<NatsWatch*>(self)->pipe_[1], &x, 1);
  }
};

}  // namespace

std::unique_ptr<ChangeWatch> watch(Client& client, const std::string& ns) {
  return std::make_unique<NatsWatch>(client, ns);
}

}  // namespace q::nats
