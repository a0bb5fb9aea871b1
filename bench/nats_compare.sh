#!/usr/bin/env bash
# Side by side: the LMDB file backend and the NATS JetStream backend on a
# 3-node loopback cluster (scripts/nats-cluster), same q binary, same commands.
#   bench/nats_compare.sh Q_BINARY [ONE_SHOT] [BULK]
# Prints messages per second for: one-shot send (one q process per message),
# one-shot receive+ack (two processes per message), bulk send (--lines) and
# drain (receive -n 100 | ack). Not part of the test suite.
set -euo pipefail
Q=${1:?usage: nats_compare.sh Q_BINARY [ONE_SHOT] [BULK]}
one=${2:-200}
bulk=${3:-10000}
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../scripts/nats-cluster
dir=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-bench.XXXXXX")
trap '"$cluster" stop "$dir/c" >/dev/null 2>&1; rm -rf "$dir"' EXIT
urls=$("$cluster" start "$dir/c" 3)
now() { date +%s.%N; }
rate() { python3 -c "import sys; print(f'{int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])):.0f}')" "$@"; }

run() {  # LABEL LOCATION
  local label=$1 loc=$2 t0 i r
  export Q_FILE=$loc
  "$Q" create one >/dev/null
  "$Q" create bulk >/dev/null
  t0=$(now)
  for ((i = 0; i < one; i++)); do "$Q" send one "message $i" >/dev/null; done
  local send1; send1=$(rate "$one" "$t0" "$(now)")
  t0=$(now)
  for ((i = 0; i < one; i++)); do
    r=$("$Q" receive one --json | jq -r .receipt)
    "$Q" ack one "$r"
  done
  local recv1; recv1=$(rate "$one" "$t0" "$(now)")
  t0=$(now)
  seq 1 "$bulk" | "$Q" send bulk --lines >/dev/null
  local sendb; sendb=$(rate "$bulk" "$t0" "$(now)")
  t0=$(now)
  while out=$("$Q" receive bulk -n 100 --json); do jq -r .receipt <<<"$out" | "$Q" ack bulk >/dev/null; done
  local drain; drain=$(rate "$bulk" "$t0" "$(now)")
  printf '%-28s one-shot send %6s/s  receive+ack %6s/s  bulk send %6s/s  drain %6s/s\n' \
    "$label" "$send1" "$recv1" "$sendb" "$drain"
}

run "LMDB file (durable)" "$dir/bench.q"
run "NATS 3-node R3 loopback" "$urls/bench"
