// The static `q` does not link the NATS client (a shared library only): a
// nats:// location is handed to `q-nats`, the same CLI linked with the NATS
// backend, before anything is parsed or read (stdin stays unread).
#pragma once

#include <optional>
#include <string>

namespace cli {

// The location this invocation names (-f/--file, else $Q_FILE) when it is a
// nats:// one; nullopt otherwise (a file, or none given).
std::optional<std::string> nats_location_arg(int argc, char** argv);

// Replaces this process with q-nats (beside this executable, else on PATH)
// with the same arguments; returns 69 after saying why when there is none.
int hand_over_to_q_nats(int argc, char** argv, const std::string& location);

}  // namespace cli
