#!/usr/bin/env bash
# Scenario 8, damaged and wrong files. Every q command on them must end with a
# clear error and a documented exit code (74 damaged/foreign/I/O, 77 no
# permission, 66 not found), never a crash or a sanitizer report (run it with
# an ASan/UBSan build too), never change a file that is not a q file, and never
# return wrong data: every message q still returns from a damaged file has
# exactly the id, body and attributes it was sent with.
#
#   corruption.sh Q [truncated|foreign|flips]        (default: all)
# truncated: a q file cut short at page boundaries and in between.
# foreign: an empty file, a directory, files of other formats (text, PNG,
#   SQLite, random bytes, an LMDB file without q's databases), a file the user
#   may not read or write.
# flips: random bytes of a q file changed (short: 100 files, long: 3000).
part=${2:-all}
set -- "$1"
source "$(dirname "$0")/lib.sh" "$@"

# A base file: queue c with bodies and attributes we know, in all states.
BASE=$T/base.q
(
  export Q_FILE=$BASE
  "$Q" create c --max-receives 2 --visibility-timeout 1h >/dev/null &&
    seq -f 'body-%g-of-the-corruption-test' 1 150 | "$Q" send c --lines -q --attr k=v &&
    python3 -c 'import random; r = random.Random(7); print("".join(r.choice("abcdef") for _ in range(9000)))' |
      "$Q" send c -q --attr big=yes &&
    "$Q" receive c -n 20 >/dev/null &&
    "$Q" receive c -n 10 --visibility-timeout 0 >/dev/null &&
    "$Q" send c delayed --delay 1h -q
) || die "cannot build the base file"
# The truth: id -> body and attributes, for every message and dead letter.
{ "$Q" -f "$BASE" peek c -n 100000 --json; "$Q" -f "$BASE" dlq list c -n 100000 --json; } |
  jq -c '{id, body: (.body // .body_base64), attributes}' | sort -u >"$T/truth"
[[ $(grep -c . "$T/truth") -ge 150 ]] || die "the base file lacks messages"

# run_all FILE WHAT: every command on FILE; checks exit codes, crashes and data.
SANITIZER_RE='AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|LeakSanitizer|Segmentation|core dumped'
run_all() {
  local f=$1 what=$2 allowed=${3:-"0 1 66 74"} cmd rc
  local cmds=("stats --json" "list" "peek c -n 100000 --json" "dlq list c -n 100000 --json"
              "receive c -n 1000 --json" "send c new-body" "stats c --json" "redrive c --json"
              "ack c m1.0123456789abcdef" "purge c" "create c2")
  for cmd in "${cmds[@]}"; do
    read -r -a argv <<<"$cmd"
    timeout -s KILL 20 "$Q" -f "$f" --lock-timeout 2s "${argv[@]}" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    COMMANDS_RUN=$((COMMANDS_RUN + 1))
    if ((rc >= 128)); then
      fail "$what: q $cmd died of signal $((rc - 128))$( ((rc == 137)) && echo ' (or hung 20 s)'): $(head -c 300 "$T/err")"
      cp "$f" "$T/crash-$COMMANDS_RUN.q" 2>/dev/null
      continue
    fi
    if grep -Eq "$SANITIZER_RE" "$T/err"; then
      fail "$what: q $cmd: sanitizer report: $(grep -E -m3 "$SANITIZER_RE" "$T/err")"
      cp "$f" "$T/crash-$COMMANDS_RUN.q" 2>/dev/null
    fi
    # ack of a receipt that is not current: 3 is its documented answer.
    [[ $cmd == ack* && $rc == 3 ]] && rc=0
    # q create makes a queue file of an empty file (what a crash during the
    # first create leaves); the commands after it then see that queue file.
    [[ $what == "an empty file" && $cmd == create* && $rc == 0 ]] && break
    if [[ " $allowed " != *" $rc "* ]]; then
      fail "$what: q $cmd exited $rc (allowed: $allowed): $(head -c 300 "$T/err")"
    elif ((rc != 0 && rc != 1)) && ! [[ -s $T/err ]]; then
      fail "$what: q $cmd exited $rc without a message"
    fi
    # Whatever q returns must be true.
    if ((rc == 0)) && [[ $cmd == peek* || $cmd == dlq* || $cmd == receive* || $cmd == redrive* ]]; then
      if ! jq -c '{id, body: (.body // .body_base64), attributes}' "$T/out" >"$T/got" 2>/dev/null; then
        fail "$what: q $cmd printed invalid JSON: $(head -c 200 "$T/out")"
        continue
      fi
      local wrong
      wrong=$(sort -u "$T/got" | comm -23 - "$T/truth" | grep -v '"body":"new-body"' | head -n 3)
      if [[ -n $wrong ]]; then
        fail "$what: q $cmd returned WRONG DATA (not as sent): $wrong"
        cp "$f" "$T/wrong-$COMMANDS_RUN.q" 2>/dev/null
      fi
    fi
  done
}
COMMANDS_RUN=0

if [[ $part == all || $part == truncated ]]; then
  size=$(stat -c %s "$BASE")
  for cut in 1 100 4095 4096 8192 12288 $((size / 2)) $((size - 4096)) $((size - 1)); do
    W=$T/trunc.q; rm -f "$W" "$W-lock"; cp "$BASE" "$W"; truncate -s "$cut" "$W"
    run_all "$W" "truncated to $cut bytes"
  done
  echo "corruption (truncated): $COMMANDS_RUN commands on truncated files"
fi

if [[ $part == all || $part == foreign ]]; then  # Files that are not q's: every command says so (74), and none is changed or
  # gets a lock file.
  mkdir -p "$T/foreign"
  printf 'hello, I am a text file\n' >"$T/foreign/text"
  printf '\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\1\0\0\0\1\x08\x02\0\0\0\x90wS\xde' >"$T/foreign/png"
  head -c 8192 /dev/urandom >"$T/foreign/random"
  if command -v sqlite3 >/dev/null; then
    sqlite3 "$T/foreign/sqlite" 'create table t(x); insert into t values (1);'
  else
    require_all && fail "sqlite3 is missing (Debian: sqlite3; scripts/bootstrap installs it)"
    { printf 'SQLite format 3\0'; head -c 4080 /dev/zero; } >"$T/foreign/sqlite"
  fi
  # An LMDB file, but not q's (mdb_load makes one from a dump).
  printf 'VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n 6b6579\n 76616c7565\nDATA=END\n' |
    mdb_load -n "$T/foreign/lmdb" && rm -f "$T/foreign/lmdb-lock"
  for f in "$T"/foreign/*; do
    sum=$(sha256sum <"$f")
    run_all "$f" "a foreign file ($(basename "$f"))" "74"
    [[ $(sha256sum <"$f") == "$sum" ]] || fail "q changed the foreign file $(basename "$f")"
    # (An LMDB file of another program may get LMDB's own lock file: any LMDB
    # tool makes it, and it is shared with that program.)
    [[ -e $f-lock && $f != */lmdb ]] && fail "q made a lock file next to the foreign file $(basename "$f")"
    grep -q "not a q queue file" "$T/err" || fail "foreign $(basename "$f"): the message does not say so: $(<"$T/err")"
  done
  : >"$T/empty.q"
  run_all "$T/empty.q" "an empty file" "74"
  mkdir -p "$T/dir.q"
  run_all "$T/dir.q" "a directory" "74"
  grep -q "directory" "$T/err" || fail "a directory: the message does not say so: $(<"$T/err")"
  # Permission: as an unprivileged user (root reads anything).
  if [[ $(id -u) != 0 ]]; then
    skip_part "not root: the permission (77) case did not run"
  elif ! command -v setpriv >/dev/null; then
    missing_part "setpriv (Debian: util-linux): the permission (77) case did not run"
  else
    chmod 755 "$T"
    for mode in 000 444; do
      W=$T/perm-$mode.q; cp "$BASE" "$W"; chmod "$mode" "$W"
      setpriv --reuid=65534 --regid=65534 --clear-groups "$Q" -f "$W" stats >"$T/out" 2>"$T/err"
      rc=$?
      [[ $rc == 77 ]] || fail "a file with mode $mode, as another user: exit $rc, expected 77: $(<"$T/err")"
      grep -qi "permission denied" "$T/err" || fail "mode $mode: the message does not say permission denied: $(<"$T/err")"
    done
  fi
  echo "corruption (foreign): $COMMANDS_RUN commands on foreign, empty, directory and unreadable files"
fi

if [[ $part == all || $part == flips ]]; then
  TRIALS=$(long_or_short 3000 100)
  size=$(stat -c %s "$BASE")
  start=$COMMANDS_RUN
  for ((trial = 1; trial <= TRIALS; trial++)); do
    W=$T/flip.q; rm -f "$W" "$W-lock"; cp "$BASE" "$W"
    nflips=$((1 + RANDOM % 8))
    python3 - "$W" "$nflips" "$trial" <<'EOF'
import random, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed * 7919)
with open(path, "r+b") as f:
    data = bytearray(f.read())
    for _ in range(n):
        # Half the flips in the two meta pages' neighbourhood is not needed:
        # anywhere in the file, as a disk would.
        i = rnd.randrange(len(data))
        data[i] ^= 1 << rnd.randrange(8) if rnd.random() < 0.7 else rnd.randrange(1, 256)
    f.seek(0)
    f.write(data)
EOF
    run_all "$W" "trial $trial ($nflips random bytes changed)"
  done
  echo "corruption (flips): $TRIALS damaged files, $((COMMANDS_RUN - start)) commands," \
       "$(grep -c . "$_FAILS") problems (crashes, wrong data, undocumented exits)"
fi
