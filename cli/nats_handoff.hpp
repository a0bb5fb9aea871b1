// The static `q` does not link the NATS client (a shared library only): a
// nats:// or tls:// location is handed to `q-nats`, the same CLI linked with
// the NATS backend, before anything is parsed or read (stdin stays unread).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cli {

// The location this invocation names (-f/--file, else $Q_FILE) when it is a
// nats:// or tls:// one; nullopt otherwise (a file, or none given).
std::optional<std::string> nats_location_arg(int argc, char** argv);

// When that location holds USER:PASSWORD@ (or TOKEN@): moves it into
// NATS_USER and NATS_PASSWORD (unsetting NATS_CREDS and NATS_NKEY: the
// location's user info wins) and returns the arguments with the location
// without it (Q_FILE too, when the location came from there), so that no
// longer-lived process shows the password in ps, and q work hands its
// handlers a Q_FILE without it; nullopt when there is none.
std::optional<std::vector<std::string>> move_user_info_to_environment(int argc, char** argv);

// Replaces this process with q-nats (beside this executable, else on PATH)
// with the same arguments, user info moved to the environment; returns 69
// after saying why when there is none.
int hand_over_to_q_nats(int argc, char** argv, const std::string& location);

// The path NAME would have beside this executable (/proc/self/exe's
// directory): how q finds its companions q-nats and q-serve; empty when the
// executable's path cannot be read.
std::string beside_this_executable(const std::string& name);

// Where q-nats would be taken from: beside this executable, else on PATH;
// nullopt when there is none (q --version).
std::optional<std::string> find_q_nats();

// For q-nats started with user info in its location: runs itself again
// without it (the same move); returns only when there was none.
void reexec_without_user_info(int argc, char** argv);

}  // namespace cli
