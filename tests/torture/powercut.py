#!/usr/bin/env python3
"""Rebuilds a queue file as a power cut may have left it, from the journal the
powerloss shim wrote (shim/powerloss.c): every write that was durable (made
through an O_DSYNC descriptor, or followed by a successful fsync/fdatasync of
the file) is applied; of the others, each 4 KiB page is kept or lost at random.

Usage: powercut.py BASE JOURNAL OUT --seed N [--keep P]
BASE is the file as it was (durably) when the journal started.
"""
import argparse
import random
import struct
import sys

PAGE = 4096


def read_journal(path):
    records = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        t = chr(data[i])
        i += 1
        if t == "S":
            records.append(("S", 0, b""))
        elif t == "T":
            (length,) = struct.unpack_from("<Q", data, i)
            i += 8
            records.append(("T", length, b""))
        elif t in "WD":
            if i + 16 > len(data):
                break  # torn last record (the writer was killed)
            off, length = struct.unpack_from("<QQ", data, i)
            i += 16
            if i + length > len(data):
                break
            records.append((t, off, data[i:i + length]))
            i += length
        else:
            sys.exit(f"powercut: bad journal record type {t!r} at {i - 1}")
    return records


def write_at(img, off, chunk):
    end = off + len(chunk)
    if end > len(img):
        img.extend(b"\0" * (end - len(img)))
    img[off:end] = chunk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("journal")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=float, default=0.5)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    records = read_journal(a.journal)
    last_sync = max((k for k, r in enumerate(records) if r[0] == "S"), default=-1)
    with open(a.base, "rb") as f:
        img = bytearray(f.read())
    durable = lost = kept = 0
    for k, (t, off, data) in enumerate(records):
        is_durable = k < last_sync or t == "D"
        if t == "S":
            continue
        if t == "T":
            if is_durable or rnd.random() < a.keep:
                del img[off:]
                if off > len(img):
                    img.extend(b"\0" * (off - len(img)))
            continue
        if is_durable:
            write_at(img, off, data)
            durable += 1
            continue
        # Not yet durable: each page of the write may or may not have reached the disk.
        for p in range(0, len(data), PAGE):
            if rnd.random() < a.keep:
                write_at(img, off + p, data[p:p + PAGE])
                kept += 1
            else:
                lost += 1
    with open(a.out, "wb") as f:
        f.write(img)
    print(f"powercut: {len(records)} journal records, last sync at {last_sync}, "
          f"{durable} durable writes, {kept} pages of later writes kept, {lost} lost")


if __name__ == "__main__":
    main()
