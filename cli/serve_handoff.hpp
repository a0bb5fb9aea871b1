// `q serve` runs in q-serve, the CLI linked with the HTTP server (Debian's
// cpp-httplib is a shared library only, which the static q cannot link, as
// with libnats and q-nats): q hands the command over before parsing it.
#pragma once

#include <memory>

#include "libq/broker.hpp"

namespace serve {
struct ServeOptions;
}

namespace cli {

// True when the command of this invocation is `serve`.
bool is_serve_command(int argc, char** argv);
// Replaces this process with q-serve (beside this executable, else on PATH);
// returns 69 after saying why when there is none.
int hand_over_to_q_serve(char** argv);

// Set by q-serve (cli/main_serve.cpp); null elsewhere.
using ServeRunner = int (*)(const serve::ServeOptions&, std::unique_ptr<q::Broker>,
                            const q::Clock&);
extern ServeRunner serve_runner;

}  // namespace cli
