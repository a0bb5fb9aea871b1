#!/usr/bin/env python3
"""Rebuilds a queue file as a power cut may have left it, from the journal the
powerloss shim wrote (shim/powerloss.c, which describes the records and the
durability model): every write that was durable (followed by a successful
sync of the file, through any descriptor, or made through an O_DSYNC/O_SYNC
descriptor) is applied; of the others, each 4 KiB page is kept or lost at
random (with probability --keep).

Usage: powercut.py BASE JOURNAL OUT --seed S [--keep P]
BASE is the file as it was (durably) when the journal started. The same
BASE, JOURNAL, seed and P always give the same file.
"""
import argparse
import random
import struct
import sys

PAGE = 4096


def read_journal(path):
    """The records, as [type, offset or length, data or number]; a torn last
    record (its writer was killed) is dropped."""
    records = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        t = chr(data[i])
        i += 1
        if t in "SX":
            records.append([t, 0, b""])
        elif t == "T":
            if i + 8 > len(data):
                break
            (length,) = struct.unpack_from("<Q", data, i)
            i += 8
            records.append([t, length, b""])
        elif t in "WCD":
            if i + 16 > len(data):
                break
            off, n = struct.unpack_from("<QQ", data, i)
            i += 16
            if t == "W":
                if i + n > len(data):
                    break
                records.append([t, off, data[i:i + n]])
                i += n
            else:
                records.append([t, off, n])
        else:
            sys.exit(f"powercut: bad journal record type {t!r} at {i - 1}")
    return records


def settle(records):
    """The writes ('W') and truncations ('T') in order, as [type, offset or
    length, data, durable, returned]: 'C' says the write returned (and cuts it
    short), 'D' makes it durable, and so does any later 'S'."""
    out = []
    last_w = {}  # offset -> index in out of the last write there
    synced = 0   # out[:synced] is durable
    for t, a, b in records:
        if t == "X":
            sys.exit("powercut: the queue file was mapped shared and writable (MDB_WRITEMAP?): "
                     "writes through the map are not in the journal")
        if t in "WT":
            if t == "W":
                last_w[a] = len(out)
            out.append([t, a, b, False, t == "T"])
        elif t in "CD":
            if a not in last_w:
                sys.exit(f"powercut: a {t!r} record at offset {a} follows no write there")
            w = out[last_w[a]]
            if t == "C":
                w[2] = w[2][:b]
                w[4] = True
            else:
                w[3] = True
        elif t == "S":
            for w in out[synced:]:
                w[3] = True
            synced = len(out)
    return out


def write_at(img, off, chunk):
    end = off + len(chunk)
    if end > len(img):
        img.extend(b"\0" * (end - len(img)))
    img[off:end] = chunk


def verify(base, data, path):
    """None when the journal accounts for the file at PATH, else what differs."""
    with open(base, "rb") as f:
        img = bytearray(f.read())
    in_flight = set()
    for t, off, chunk, _, returned in data:
        if t == "T":
            del img[off:]
            if off > len(img):
                img.extend(b"\0" * (off - len(img)))
            continue
        write_at(img, off, chunk)
        if not returned:
            in_flight.update(range(off // PAGE, (off + len(chunk) + PAGE - 1) // PAGE))
    with open(path, "rb") as f:
        real = f.read()
    pages = (max(len(img), len(real)) + PAGE - 1) // PAGE
    differ = [p for p in range(pages) if img[p * PAGE:(p + 1) * PAGE] != real[p * PAGE:(p + 1) * PAGE]]
    unexplained = [p for p in differ if p not in in_flight]
    print(f"powercut: the journal replayed in full is the file ({len(real)} bytes) but for "
          f"{len(differ)} pages, {len(unexplained)} of them outside the "
          f"{len(in_flight)} pages of writes cut short by the kill")
    if unexplained:
        return (f"powercut: the journal does not account for {len(unexplained)} pages of {path} "
                f"(the shim missed writes): pages {unexplained[:10]}")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("journal")
    ap.add_argument("out")
    ap.add_argument("--seed", default="1", help="any string")
    ap.add_argument("--keep", type=float, default=0.5,
                    help="the chance that a page written since the last durable point survives")
    ap.add_argument("--verify", metavar="FILE",
                    help="instead: check that the journal accounts for FILE (the file as the "
                         "processes left it): BASE with every write applied is FILE, but for "
                         "pages of writes that never returned (a process killed inside them)")
    a = ap.parse_args()
    rnd = random.Random(a.seed)  # (str seeds are hashed with SHA-512: stable across runs)
    records = read_journal(a.journal)
    data = settle(records)
    with open(a.base, "rb") as f:
        img = bytearray(f.read())
    durable = lost = kept = 0
    if a.verify:
        sys.exit(verify(a.base, data, a.verify))
    for t, off, chunk, is_durable, _ in data:
        if t == "T":
            if is_durable or rnd.random() < a.keep:
                del img[off:]
                if off > len(img):
                    img.extend(b"\0" * (off - len(img)))
            continue
        if is_durable:
            write_at(img, off, chunk)
            durable += 1
            continue
        # Not yet durable: each page of the write may or may not have reached the disk.
        for p in range(0, len(chunk), PAGE):
            if rnd.random() < a.keep:
                write_at(img, off + p, chunk[p:p + PAGE])
                kept += 1
            else:
                lost += 1
    with open(a.out, "wb") as f:
        f.write(img)
    print(f"powercut: seed {a.seed}, keep {a.keep}: {len(records)} journal records, "
          f"{durable} durable writes, "
          f"{kept} pages of later writes kept, {lost} lost")


if __name__ == "__main__":
    main()
