// FIFO receive+ack throughput by number of groups, against a standard queue,
// measured side by side: each round drains every contender once, in turn.
//
//   fifo_groups [MESSAGES] [ROUNDS]     (default 100000 messages, 3 rounds)
//
// Every contender gets the same messages; the drain is receive -n 100 + one
// ack of the batch, durable, as `q receive -n 100 | q ack` does in one process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "libq/lmdb/broker.hpp"

namespace fs = std::filesystem;

struct Contender {
  std::string name;
  bool fifo;
  std::size_t groups;  // 0: standard queue
  std::vector<double> rates;
};

static double drain(q::Broker& broker, const std::string& queue, std::size_t expected) {
  auto start = std::chrono::steady_clock::now();
  std::size_t done = 0;
  q::ReceiveOptions options;
  options.max_messages = 100;
  for (;;) {
    auto got = broker.receive(queue, options);
    if (got.empty()) break;
    std::vector<std::string> receipts;
    for (auto& m : got) receipts.push_back(std::move(m.receipt));
    broker.ack(queue, receipts);
    done += got.size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (done != expected) {
    std::fprintf(stderr, "%s: drained %zu of %zu\n", queue.c_str(), done, expected);
    std::exit(1);
  }
  return static_cast<double>(done) / seconds;
}

int main(int argc, char** argv) {
  std::size_t messages = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 100000;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  char tmpl[] = "/tmp/q-fifo-bench-XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  q::LmdbOptions options;
  options.open.path = (dir / "bench.q").string();
  options.open.create = true;
  auto broker = q::open_lmdb_broker(options);

  std::vector<Contender> contenders = {{"standard", false, 0, {}},
                                       {"fifo, 1 group", true, 1, {}},
                                       {"fifo, 100 groups", true, 100, {}},
                                       {"fifo, 100000 groups", true, 100000, {}}};
  for (int round = 0; round < rounds; ++round) {
    for (auto& c : contenders) {
      std::string queue = "bench-" + std::to_string(&c - contenders.data());
      q::ConfigChange change;
      change.fifo = c.fifo;
      change.max_receives = 0;
      broker->create_queue(queue, change);
      // Fill in batches of 10,000, groups round-robin (not timed).
      for (std::size_t sent = 0; sent < messages;) {
        std::vector<q::OutgoingMessage> batch;
        for (std::size_t i = 0; i < 10000 && sent < messages; ++i, ++sent) {
          std::string group = c.fifo ? "g" + std::to_string(sent % c.groups) : "";
          batch.push_back({std::string(100, 'x'), {}, "", group});
        }
        broker->send(queue, std::move(batch), {});
      }
      c.rates.push_back(drain(*broker, queue, messages));
      broker->delete_queue(queue);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double base = median(contenders[0].rates);
  std::printf("| queue | receive+ack msg/s (median of %d) | vs standard |\n|---|---|---|\n",
              rounds);
  for (const auto& c : contenders)
    std::printf("| %s | %.0f | %.2fx |\n", c.name.c_str(), median(c.rates), median(c.rates) / base);
  fs::remove_all(dir);
  return 0;
}
