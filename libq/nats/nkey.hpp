// NKeys as the NATS ecosystem writes them (nkeys: base32 of a prefix byte,
// the ed25519 seed or public key, and a CRC-16), for NATS_NKEY: nats.c signs
// the server's nonce with a seed but wants the user's public key given.
#pragma once

#include <string>

namespace q::nats {

// The first line of `path` that holds a user seed (SU...), else Error(BadData)
// naming `variable` and the file (never its content).
std::string read_nkey_seed(const std::string& path, const char* variable = "NATS_NKEY");
// Checks that the .creds file `path` (NATS_CREDS, nsc's format) holds a user
// JWT and a user seed, as nats.c will look for them; else Error(BadData)
// naming the file (never its content). nats.c reads the file only while it
// connects, and a refusal there looks like no server answering.
void check_creds_file(const std::string& path);
// The user public key (U...) of a user seed; Error(BadData) naming `what`
// when the seed is not one.
std::string nkey_public_key(const std::string& seed, const std::string& what);

}  // namespace q::nats
