#!/usr/bin/env python3
"""Makes the decentralized (JWT) log-in of NATS for the tests: an operator,
a system account, an account with JetStream, a user of it in a .creds file
(what `nsc` makes), and a user of an account the operator never signed.

    jwt.py DIR    writes DIR/operator.jwt, DIR/resolver.conf (the server
                  settings: operator, system_account, a MEMORY resolver
                  preloaded with both accounts), DIR/user.creds and
                  DIR/stranger.creds (0600)

JWTs as github.com/nats-io/jwt v2 encodes them: base64url (no padding) of
the header {"typ":"JWT","alg":"ed25519-nkey"} and of the claims, joined by
".", then the issuer's ed25519 signature of those two parts, base64url.
"""
import base64
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nkey  # noqa: E402

UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def b64(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def encode(claims, issuer):
    claims = dict(claims, iss=issuer.public, iat=int(time.time()))
    # jti: the hash of the claims without it, as the Go library makes it
    # (the server does not check it; nsc's tools show it)
    digest = hashlib.new("sha512_256", json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signed = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode()) + "." + \
        b64(json.dumps(claims).encode())
    return signed + "." + b64(issuer.sign(signed.encode()))


def account(name, operator, jetstream):
    kp = nkey.KeyPair(nkey.PREFIX_ACCOUNT)
    limits = dict(UNLIMITED, imports=-1, exports=-1, wildcards=True, conn=-1, leaf=-1)
    if jetstream:
        limits.update({"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1})
    claims = {"sub": kp.public, "name": name,
              "nats": {"limits": limits, "type": "account", "version": 2}}
    return kp, encode(claims, operator)


def creds(path, name, acc):
    kp = nkey.KeyPair(nkey.PREFIX_USER)
    claims = {"sub": kp.public, "name": name,
              "nats": dict(UNLIMITED, pub={}, sub={}, type="user", version=2)}
    token = encode(claims, acc)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
                "************************* IMPORTANT *************************\n"
                "NKEY Seed printed below can be used to sign and prove identity.\n"
                "NKEYs are sensitive and should be treated as secrets.\n\n"
                f"-----BEGIN USER NKEY SEED-----\n{kp.seed}\n------END USER NKEY SEED------\n\n"
                "*************************************************************\n")
    return kp


def main():
    out = sys.argv[1]
    operator = nkey.KeyPair(nkey.PREFIX_OPERATOR)
    op_jwt = encode({"sub": operator.public, "name": "q-test",
                     "nats": {"type": "operator", "version": 2}}, operator)
    with open(os.path.join(out, "operator.jwt"), "w") as f:
        f.write(op_jwt + "\n")
    sys_kp, sys_jwt = account("SYS", operator, jetstream=False)
    app_kp, app_jwt = account("app", operator, jetstream=True)
    with open(os.path.join(out, "resolver.conf"), "w") as f:
        f.write(f'operator: "{os.path.join(out, "operator.jwt")}"\n'
                f"system_account: {sys_kp.public}\n"
                "resolver: MEMORY\n"
                f"resolver_preload: {{\n  {sys_kp.public}: {sys_jwt}\n"
                f"  {app_kp.public}: {app_jwt}\n}}\n")
    creds(os.path.join(out, "user.creds"), "q", app_kp)
    # an account the operator did not sign: its users are refused
    stranger_operator = nkey.KeyPair(nkey.PREFIX_OPERATOR)
    stranger_kp, _ = account("stranger", stranger_operator, jetstream=True)
    creds(os.path.join(out, "stranger.creds"), "stranger", stranger_kp)


if __name__ == "__main__":
    sys.exit(main())
