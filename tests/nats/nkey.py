#!/usr/bin/env python3
"""Makes an NKey user (for the NATS tests): prints "SEED PUBLIC_KEY".

NKey encoding (github.com/nats-io/nkeys): base32 (no padding) of a prefix
byte (or two for a seed), the 32-byte ed25519 seed or public key, and a
CRC-16/XMODEM, little-endian. The ed25519 key pair comes from `openssl
genpkey` (the raw bytes are the DER encodings' last 32 bytes), so nothing
beyond python3 and openssl is needed.
"""
import base64
import subprocess
import sys

PREFIX_SEED = 18 << 3  # 'S'
PREFIX_USER = 20 << 3  # 'U'


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


def main():
    pem = subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519"], check=True,
                         capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-outform", "DER"], input=pem, check=True,
                         capture_output=True).stdout
    pub = subprocess.run(["openssl", "pkey", "-pubout", "-outform", "DER"], input=pem,
                         check=True, capture_output=True).stdout
    seed, public = der[-32:], pub[-32:]
    b0 = PREFIX_SEED | (PREFIX_USER >> 5)
    b1 = (PREFIX_USER & 31) << 3
    print(encode([b0, b1] + list(seed)), encode([PREFIX_USER] + list(public)))


if __name__ == "__main__":
    sys.exit(main())
