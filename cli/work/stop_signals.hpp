// The one signal handler of q's long-running commands (stats --watch, top,
// work): it counts stop signals and wakes a poll loop, nothing else (it must
// stay async-signal-safe).
#pragma once

#include <initializer_list>

namespace cli {

// Handles `stop` (counted by stop_signals()) and `wake` (only waking), with
// SA_RESTART, and unblocks them all (a parent's blocked mask is inherited:
// the command could never be stopped). With `wake_pipe`, every handled
// signal also writes a byte to the pipe read at wake_fd(). Throws
// q::Error(Io) when the pipe cannot be made.
void install_stop_signals(std::initializer_list<int> stop, std::initializer_list<int> wake = {},
                          bool wake_pipe = false);

// How many stop signals arrived since install_stop_signals.
int stop_signals();

// The wake pipe's read end (non-blocking), -1 without one; drain_wake()
// empties it after poll said it was readable.
int wake_fd();
void drain_wake();

}  // namespace cli
