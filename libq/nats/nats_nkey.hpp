// NKeys as the NATS ecosystem writes them (nkeys: base32 of a prefix byte,
// the ed25519 seed or public key, and a CRC-16), for NATS_NKEY: nats.c signs
// the server's nonce with a seed but wants the user's public key given.
#pragma once

#include <string>

namespace q::nats {

// The first line of `path` that holds a user seed (SU...), else Error(BadData)
// naming the file (never its content).
std::string read_nkey_seed(const std::string& path);
// The user public key (U...) of a user seed; Error(BadData) naming `what`
// when the seed is not one.
std::string nkey_public_key(const std::string& seed, const std::string& what);

}  // namespace q::nats
