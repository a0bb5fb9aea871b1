// The stage model of fuzz_model (issue 25, "make the machine find this
// class"): `q work SRC --to DST` gives its command the descriptor that
// cli::work::output_pipe makes, and a command writes through whatever it
// makes of it: the descriptor itself, a dup, /dev/stdout reopened
// (/proc/self/fd/N, /dev/fd/N) with O_TRUNC as a shell's `>` and cp do, with
// O_APPEND as `>>`, without either as dd conv=notrunc, stdio on a dup, a
// reopened descriptor kept open and written between the others
// (`exec >/dev/stdout`), the original closed while a copy writes on. Whatever
// the route, the stage's output is every byte in the order written (q-work(1));
// the model says which messages that makes (--to-lines or whole) and whether
// it passes --to-max-bytes, and libq must have sent exactly those. A memory
// file in place of the pipe (issue 25 item 8) fails at the first reopen.
//
// The "command" writes in this process, as a shell running `cmd >/dev/stdout`
// would through the same kernel paths, so a fuzz run spawns nothing.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bytes.hpp"
#include "cli/work/worker_child.hpp"

namespace qfuzz {

enum class Route : std::uint8_t {
  Direct,        // write(2) on the descriptor
  Dup,           // a dup, closed after the write
  ReopenTrunc,   // open("/proc/self/fd/N", O_WRONLY | O_CREAT | O_TRUNC): `>/dev/stdout`, cp
  ReopenAppend,  // open("/dev/fd/N", O_WRONLY | O_CREAT | O_APPEND): `>>/dev/stdout`
  ReopenPlain,   // open("/proc/self/fd/N", O_WRONLY): dd conv=notrunc of=/dev/stdout
  Stdio,         // fdopen of a dup, written in two fwrite calls, fclose
  Kept,          // a reopen (O_TRUNC) made at its first use and kept to the end
  Move,          // dup2 to a new number, the old one closed; later writes use the new
};
constexpr std::uint32_t kRoutes = 8;

inline const char* route_name(Route r) {
  static const char* names[] = {"direct", "dup",   "reopen>", "reopen>>",
                                "reopen", "stdio", "kept",    "move"};
  return names[static_cast<int>(r)];
}

struct StageWrite {
  Route route = Route::Direct;
  std::string bytes;
  bool pump_after = false;  // q work's reader reads what is there before the next write
};

struct StagePlan {
  bool lines = false;       // --to-lines
  std::uint64_t limit = 0;  // --to-max-bytes
  std::vector<StageWrite> writes;
};

inline StagePlan plan_stage(Bytes& in) {
  StagePlan plan;
  plan.lines = in.coin();
  static const std::uint64_t limits[] = {1 << 20, 1 << 20, 40, 400};
  plan.limit = limits[in.below(4)];
  const std::uint32_t n = in.below(10);
  for (std::uint32_t k = 0; k < n; ++k) {
    StageWrite w;
    w.route = static_cast<Route>(in.below(kRoutes));
    const std::uint32_t len = in.below(8) == 0 ? 100 + in.below(200) : in.below(24);
    for (std::uint32_t i = 0; i < len; ++i) {
      const std::uint32_t c = in.below(16);
      w.bytes.push_back(c == 0 ? '\n' : c == 1 ? '\0' : static_cast<char>('a' + (k + i) % 26));
    }
    w.pump_after = in.coin();
    plan.writes.push_back(std::move(w));
  }
  return plan;
}

inline std::string describe(const StagePlan& plan) {
  std::string s = fmt::format("{} limit {}:", plan.lines ? "--to-lines" : "whole", plan.limit);
  for (const auto& w : plan.writes)
    s += fmt::format(" {}({}){}", route_name(w.route), w.bytes.size(), w.pump_after ? "+read" : "");
  return s;
}

// Bytes as a trace shows them: newlines, NULs and the like as \xNN.
inline std::string shown(const std::string& bytes) {
  std::string s;
  for (unsigned char c : bytes)
    s += c >= 0x20 && c < 0x7f && c != '\\' ? std::string(1, static_cast<char>(c))
                                            : fmt::format("\\x{:02x}", c);
  return s;
}

// The model: every byte in the order written.
inline std::string expected_output(const StagePlan& plan) {
  std::string out;
  for (const auto& w : plan.writes) out += w.bytes;
  return out;
}

// The model: the messages of q-work(1)'s --to and --to-lines (one a line,
// without its newline; a last line without one counts; an empty line is an
// empty message); no output, no message.
inline std::vector<std::string> expected_bodies(const StagePlan& plan) {
  const std::string out = expected_output(plan);
  std::vector<std::string> bodies;
  if (out.empty()) return bodies;
  if (!plan.lines) return {out};
  std::string line;
  for (char c : out) {
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    bodies.push_back(line);
    line.clear();
  }
  if (!line.empty()) bodies.push_back(line);
  return bodies;
}

struct StageRun {
  std::optional<std::string> output;  // none: the reader refused it (over the limit)
  std::string error;                  // a write that failed: the command would have seen it
};

// Runs the plan's writes on the pipe q work gives a command, reading it as
// q work does (cli::work::pump_output).
inline StageRun run_stage(const StagePlan& plan) {
  signal(SIGPIPE, SIG_IGN);  // a write after the reader gave up: EPIPE, as a command sees
  StageRun run;
  int out = -1;
  int in = cli::work::output_pipe(out);
  std::string got;
  bool refused = false;
  int kept = -1;
  auto write_all = [&](int fd, const std::string& bytes, const char* how) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (run.error.empty())
          run.error = fmt::format("write through {}: {}", how, std::strerror(errno));
        return;
      }
      done += static_cast<std::size_t>(n);
    }
  };
  auto reopen = [&](const char* dir, int flags) {
    int fd = ::open(fmt::format("{}/{}", dir, out).c_str(), flags | O_CLOEXEC, 0600);
    if (fd < 0 && run.error.empty())
      run.error = fmt::format("reopen {}/{}: {}", dir, out, std::strerror(errno));
    return fd;
  };
  for (const auto& w : plan.writes) {
    if (refused) break;  // the command got EPIPE and stopped
    const char* how = route_name(w.route);
    switch (w.route) {
      case Route::Direct: write_all(out, w.bytes, how); break;
      case Route::Dup: {
        int fd = ::dup(out);
        write_all(fd, w.bytes, how);
        ::close(fd);
        break;
      }
      case Route::ReopenTrunc:
      case Route::ReopenAppend:
      case Route::ReopenPlain: {
        int flags = O_WRONLY;
        if (w.route == Route::ReopenTrunc) flags |= O_CREAT | O_TRUNC;
        if (w.route == Route::ReopenAppend) flags |= O_CREAT | O_APPEND;
        int fd = reopen(w.route == Route::ReopenAppend ? "/dev/fd" : "/proc/self/fd", flags);
        if (fd >= 0) write_all(fd, w.bytes, how);
        if (fd >= 0) ::close(fd);
        break;
      }
      case Route::Stdio: {
        std::FILE* f = ::fdopen(::dup(out), "w");
        if (!f) {
          run.error = "fdopen failed";
          break;
        }
        const std::size_t half = w.bytes.size() / 2;
        std::fwrite(w.bytes.data(), 1, half, f);
        std::fwrite(w.bytes.data() + half, 1, w.bytes.size() - half, f);
        if (std::fclose(f) != 0 && run.error.empty())
          run.error = fmt::format("stdio: {}", std::strerror(errno));
        break;
      }
      case Route::Kept:
        if (kept < 0) kept = reopen("/proc/self/fd", O_WRONLY | O_CREAT | O_TRUNC);
        if (kept >= 0) write_all(kept, w.bytes, how);
        break;
      case Route::Move: {
        int moved = ::fcntl(out, F_DUPFD_CLOEXEC, out + 1);
        ::close(out);
        out = moved;
        write_all(out, w.bytes, how);
        break;
      }
    }
    if (w.pump_after && in >= 0 && !cli::work::pump_output(in, got, plan.limit)) refused = true;
  }
  if (kept >= 0) ::close(kept);
  ::close(out);
  // The command has exited: read to the end of the stream (every write end
  // is closed, so it ends at once; a leaked one would keep it open).
  for (int tries = 0; in >= 0 && !refused; ++tries) {
    if (tries == 1000) {
      run.error = "the output pipe did not end: a write end was left open";
      break;
    }
    if (!cli::work::pump_output(in, got, plan.limit)) refused = true;
  }
  if (in >= 0) ::close(in);
  if (!refused) run.output = std::move(got);
  if (refused) run.error.clear();  // EPIPE after the refusal is what a command sees
  return run;
}

}  // namespace qfuzz
