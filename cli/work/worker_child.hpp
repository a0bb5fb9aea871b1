// Starting and reaping the commands of `q work`: the signals that wake its
// loop (through a self-pipe), the command's environment, the clone and exec
// with its error report, the stderr pipe, and waitpid. No queue operations.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "libq/broker.hpp"

namespace cli::work {

// ---- signals: the handlers only count and wake the loop ----
// SIGTERM and SIGINT are counted, SIGCHLD only wakes; every one writes a byte
// to the wake pipe.
void install_signals();
int wake_fd();
void drain_wake_pipe();
int stop_signals();  // SIGTERM/SIGINT received so far

// LMDB's descriptors are not close-on-exec; a command must not inherit them.
void close_on_exec_everything();

// The path execve needs, looked up once rather than per message; throws
// q::Error(Usage) naming the command.
std::string find_program(const std::string& name);

std::string signal_name(int signo);
q::Millis steady_now();

// q work's environment for message `m`, each name once (see work/worker_child.cpp).
std::vector<std::string> environment(const q::Message& m, const std::string& queue,
                                     const std::string& queue_file);

struct Child {
  pid_t pid = -1;
  int stderr_fd = -1;    // non-blocking read end of the command's stderr
  int exec_errno = 0;    // the command could not be run at all
  q::Millis forked = 0;  // steady clock: when it started
};

// Starts `program` (argv[0]) with `args` (argv[1..]) in its own process group,
// `body` on its stdin through a memory file, its stderr on a pipe, and its
// stdout on `stdout_fd` (-1: q work's own; --to: a pipe). Throws q::Error(Io) when it
// cannot start it.
Child spawn(const std::string& program, const std::vector<std::string>& args,
            const std::vector<std::string>& env, const std::string& body, int stdout_fd = -1);

// Copies what the command wrote to stderr (readable now) to q work's stderr
// after calling `before_write`, keeping the tail in `tail`; closes `fd` and
// sets it to -1 at the end of the stream.
// `head` keeps the first KiB (its first line names how a run failed, for
// grouping dead letters), `tail` the end.
void pump_stderr(int& fd, std::string& tail, std::string& head,
                 const std::function<void()>& before_write);

// --to: a pipe for a command's stdout (issue 25 item 8: never a file, which a
// command reopening /dev/stdout would truncate). Returns the non-blocking
// read end and sets `write_end` (close-on-exec: spawn dup2s it).
int output_pipe(int& write_end);
// Appends what can be read from `fd` now to `output`; closes `fd` and sets it
// to -1 at the end of the stream. False (output emptied, `fd` closed) as soon
// as the output would exceed `limit` bytes: memory stays bounded by it.
bool pump_output(int& fd, std::string& output, std::uint64_t limit);

// One command that ended: its pid and wait status; none when no child ended.
struct Reaped {
  pid_t pid = -1;
  int status = 0;
};
bool reap_one(Reaped& out);

}  // namespace cli::work
