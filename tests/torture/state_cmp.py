#!/usr/bin/env python3
"""Is a dumped state (state.sh `dump`) the expected one?

    state_cmp.py WANT_FILE GOT_FILE SHIFT_MS SLACK_MS

The dump writes q's times (lease ends, delays) as @MS tokens. Every other
token must be equal. A time is either one the command did not touch (equal to
the expected one exactly) or one it set from its own clock (now + a lease, a
delay): equal to the expected one moved by SHIFT_MS (when this run started
minus when the run that made WANT started), within SLACK_MS (the two runs'
durations: when during its run each command read the clock). Exit 0 when GOT
is WANT, 1 when not (the first difference on stderr), 2 on bad arguments.
"""
import re
import sys

TIME = re.compile(r"@(\d+)")


def split(line):
    """The line without its times, and its times."""
    return TIME.sub("@", line), [int(t) for t in TIME.findall(line)]


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    want = open(sys.argv[1]).read().splitlines()
    got = open(sys.argv[2]).read().splitlines()
    shift, slack = int(sys.argv[3]), int(sys.argv[4])
    if len(want) != len(got):
        print(f"state_cmp: {len(got)} lines, expected {len(want)}", file=sys.stderr)
        return 1
    for w, g in zip(want, got):
        (wt, wtimes), (gt, gtimes) = split(w), split(g)
        if wt != gt or len(wtimes) != len(gtimes):
            print(f"state_cmp: got {g!r}, expected {w!r}", file=sys.stderr)
            return 1
        for a, b in zip(wtimes, gtimes):
            if b != a and abs(b - (a + shift)) > slack:
                print(f"state_cmp: time {b} in {g!r}: expected {a} (untouched) or "
                      f"{a + shift} +- {slack} ms (set by the command)", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
