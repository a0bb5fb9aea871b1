#!/usr/bin/env python3
"""Makes an NKey user (for the NATS tests): prints "SEED PUBLIC_KEY".

NKey encoding (github.com/nats-io/nkeys): base32 (no padding) of a prefix
byte (or two for a seed), the 32-byte ed25519 seed or public key, and a
CRC-16/XMODEM, little-endian. The ed25519 key pair comes from `openssl
genpkey` (the raw bytes are the DER encodings' last 32 bytes), so nothing
beyond python3 and openssl is needed. tests/nats/jwt.py imports it for the
operator, account and user keys of an operator-mode cluster.
"""
import base64
import subprocess
import sys

PREFIX_SEED = 18 << 3  # 'S'
PREFIX_USER = 20 << 3  # 'U'
PREFIX_ACCOUNT = 0  # 'A'
PREFIX_OPERATOR = 14 << 3  # 'O'


def crc16(data):
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def encode(raw):
    raw = bytes(raw)
    c = crc16(raw)
    return base64.b32encode(raw + bytes([c & 0xFF, c >> 8])).decode().rstrip("=")


class KeyPair:
    """An ed25519 key pair of one NKey kind (PREFIX_USER, _ACCOUNT, _OPERATOR)."""

    def __init__(self, prefix):
        self.pem = subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519"], check=True,
                                  capture_output=True).stdout
        der = subprocess.run(["openssl", "pkey", "-outform", "DER"], input=self.pem,
                             check=True, capture_output=True).stdout
        pub = subprocess.run(["openssl", "pkey", "-pubout", "-outform", "DER"], input=self.pem,
                             check=True, capture_output=True).stdout
        b0 = PREFIX_SEED | (prefix >> 5)
        b1 = (prefix & 31) << 3
        self.seed = encode([b0, b1] + list(der[-32:]))
        self.public = encode([prefix] + list(pub[-32:]))

    def sign(self, data):
        """The raw ed25519 signature of DATA (bytes)."""
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            key, message = os.path.join(tmp, "key.pem"), os.path.join(tmp, "message")
            with open(key, "wb") as f:
                f.write(self.pem)
            with open(message, "wb") as f:  # a one-shot ed25519 sign reads a file, not a pipe
                f.write(data)
            return subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", key,
                                   "-in", message], check=True, capture_output=True).stdout


def main():
    user = KeyPair(PREFIX_USER)
    print(user.seed, user.public)


if __name__ == "__main__":
    sys.exit(main())
