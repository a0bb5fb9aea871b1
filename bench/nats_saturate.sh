#!/usr/bin/env bash
# How many concurrent consumers it takes to saturate a 3-node loopback NATS
# JetStream cluster (issue 16), and where the time goes. Not part of the test
# suite.
#
#   bench/nats_saturate.sh Q_BINARY [MESSAGES] [ROUNDS] [CONSUMERS...]
#
# For each consumer count C (default 1 2 4 8 16) and each round: a queue gets
# MESSAGES (default 2000) by one bulk send, then C consumer processes drain it
# at once, each looping `q receive -n 10 --json | q ack` until a receive finds
# nothing. Drain throughput = MESSAGES / wall time, the median of ROUNDS
# (default 3); the same drain on an LMDB file in the same run, interleaved
# (round by round: file, then NATS), so both see the same machine load. Per
# NATS drain: the CPU seconds of the three nats-server processes (utime+stime
# from /proc/PID/stat) and of the consumers (q-nats, from bash's `times`), per
# message. Then the round trips of one message: strace counts the socket writes
# (each request q-nats sends) of a `receive -n 1` and of its `ack`, and of a
# `receive -n 10` and the ack of its 10 receipts. The load average is printed
# before and after.
set -euo pipefail
Q=${1:?usage: nats_saturate.sh Q_BINARY [MESSAGES] [ROUNDS] [CONSUMERS...]}
N=${2:-2000}
ROUNDS=${3:-3}
shift $(($# < 3 ? $# : 3))
COUNTS=("$@")
((${#COUNTS[@]})) || COUNTS=(1 2 4 8 16)
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../scripts/nats-cluster
dir=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-saturate.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; "$cluster" stop "$dir/c" >/dev/null 2>&1; rm -rf "$dir"' EXIT
urls=$("$cluster" start "$dir/c" 3)
source "$dir/c/env"
pids=$(cat "$dir"/c/n*.pid)
tick=$(getconf CLK_TCK)

server_ticks() {  # utime+stime of the three nats-server processes, in clock ticks
  local p sum=0 f
  for p in $pids; do
    read -r -a f <"/proc/$p/stat"
    sum=$((sum + f[13] + f[14]))
  done
  echo "$sum"
}
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# consumer QUEUE: receive and ack until a receive finds nothing; prints the
# children's CPU seconds (user + system) at the end.
consumer() {
  local out
  while out=$("$Q" receive "$1" -n 10 --json --visibility-timeout 1m); do
    jq -r .receipt <<<"$out" | "$Q" ack "$1" >/dev/null
  done
  # (into a file: `times | awk` would report the pipeline's subshell, which has no children)
  times >"$dir/times.$BASHPID"
  awk 'NR == 2 {gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4}' "$dir/times.$BASHPID"
}

# drain LOCATION QUEUE C: fill the queue, drain it with C consumers; prints
# "SECONDS SERVER_CPU_S CLIENT_CPU_S".
drain() {
  local loc=$1 queue=$2 c=$3 i t0 t1 s0 s1
  export Q_FILE=$loc
  "$Q" create "$queue" --visibility-timeout 1m >/dev/null
  seq 1 "$N" | "$Q" send "$queue" --lines >/dev/null
  s0=$(server_ticks)
  t0=$(date +%s.%N)
  for ((i = 0; i < c; i++)); do consumer "$queue" >"$dir/cpu.$i" & done
  wait
  t1=$(date +%s.%N)
  s1=$(server_ticks)
  local left
  left=$("$Q" stats "$queue" --json | jq '.visible + .in_flight')
  ((left == 0)) || echo "warning: $left messages left in $queue" >&2
  "$Q" delete "$queue" --yes >/dev/null 2>&1 || true
  python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]), (int(sys.argv[4]) - int(sys.argv[3])) / int(sys.argv[5]), sum(float(open(f).read() or 0) for f in sys.argv[6:]))' \
    "$t0" "$t1" "$s0" "$s1" "$tick" "$dir"/cpu.*
  rm -f "$dir"/cpu.*
}

echo "nats_saturate: $N messages a drain, $ROUNDS rounds, consumers ${COUNTS[*]}; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %12s %12s %14s %14s %14s\n' consumers "file msg/s" "NATS msg/s" "server ms/msg" "client ms/msg" "NATS speed-up"
base=""
for c in "${COUNTS[@]}"; do
  : >"$dir/f" && : >"$dir/n" && : >"$dir/s" && : >"$dir/k"
  for ((r = 0; r < ROUNDS; r++)); do
    read -r secs _ _ < <(drain "$dir/bench.q" "f$c$r" "$c")
    python3 -c "print($N / $secs)" >>"$dir/f"
    read -r secs scpu ccpu < <(drain "$urls/sat" "n$c$r" "$c")
    python3 -c "print($N / $secs)" >>"$dir/n"
    python3 -c "print($scpu * 1000 / $N)" >>"$dir/s"
    python3 -c "print($ccpu * 1000 / $N)" >>"$dir/k"
  done
  f=$(median <"$dir/f") n=$(median <"$dir/n") s=$(median <"$dir/s") k=$(median <"$dir/k")
  base=${base:-$n}
  printf '%-10s %12.0f %12.0f %14.2f %14.2f %13.2fx\n' "$c" "$f" "$n" "$s" "$k" "$(python3 -c "print($n / $base)")"
done

# Round trips of one message: socket writes of q-nats (each a request; the
# connect handshake, CONNECT + PING, is counted apart as the writes of `stats`).
if command -v strace >/dev/null; then
  export Q_FILE=$urls/sat
  "$Q" create rt >/dev/null
  seq 1 20 | "$Q" send rt --lines >/dev/null
  writes() {  # the write/sendto/writev calls of a q command and its exec'd q-nats
    strace -f -qq -e trace=write,writev,sendto,sendmsg -o "$dir/st" "$Q" "$@" >"$dir/out" 2>/dev/null || true
    grep -cvE '^[0-9]+ +write\((1|2),' "$dir/st"
  }
  base_w=$(writes stats rt --json)
  w1=$(writes receive rt --json); r1=$(jq -r .receipt "$dir/out")
  a1=$(printf '%s\n' "$r1" | { strace -f -qq -e trace=write,writev,sendto,sendmsg -o "$dir/st" "$Q" ack rt >/dev/null; grep -cvE '^[0-9]+ +write\((1|2),' "$dir/st"; })
  w10=$(writes receive rt -n 10 --json)
  a10=$(jq -r .receipt "$dir/out" | { strace -f -qq -e trace=write,writev,sendto,sendmsg -o "$dir/st" "$Q" ack rt >/dev/null; grep -cvE '^[0-9]+ +write\((1|2),' "$dir/st"; })
  echo "socket writes (requests) per command, connect included: stats $base_w; receive -n 1: $w1, its ack: $a1; receive -n 10: $w10, the ack of its 10 receipts: $a10"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
