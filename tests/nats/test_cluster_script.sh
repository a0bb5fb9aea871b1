#!/usr/bin/env bash
# scripts/nats-cluster: a 3-node JetStream cluster on free loopback ports forms a
# meta group, survives kill -9 of its meta leader (a new leader is elected), the
# node rejoins after a restart, and stop leaves no process or directory behind.
# Skipped (77) when Debian's nats-server is not installed (a failure under CI=true or Q_REQUIRE_ALL=1).
source "$(dirname "$0")/lib.sh"
nats_require
dir=$(mktemp -d "${TMPDIR:-/tmp}/q-nats-test.XXXXXX")
trap '"$cluster" stop "$dir" 2>/dev/null; rm -rf "$dir"' EXIT

urls=$("$cluster" start "$dir" 3) || { echo "FAIL: start"; exit 1; }
[[ $urls =~ ^nats://127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+$ ]] ||
  fail "start printed '$urls', not a 3-node location"
leader=$("$cluster" status "$dir" | sed -n 's/^n1 running .*meta leader: \(n[0-9]\)$/\1/p')
[[ -n $leader ]] || fail "no meta leader after start: $("$cluster" status "$dir")"
n=${leader#n}
"$cluster" kill "$dir" "$n" || fail "kill of the leader n$n"
deadline=$((SECONDS + 30)) new=""
while ((SECONDS < deadline)); do
  new=$("$cluster" status "$dir" | grep -v "^n$n " | sed -n 's/.*meta leader: \(n[0-9]\)$/\1/p' | head -1)
  [[ -n $new && $new != "$leader" ]] && break
  sleep 0.2
done
[[ -n $new && $new != "$leader" ]] || fail "no new leader 30 s after killing $leader"
"$cluster" restart "$dir" "$n" || fail "restart of n$n"
# Read whole before matching: grep -q would stop reading early, and under
# pipefail the status command's SIGPIPE would look like a failure.
status=$("$cluster" status "$dir")
[[ $status =~ (^|$'\n')n$n\ running\ .*meta\ leader:\ n ]] || fail "n$n did not rejoin: $status"
pids=$(cat "$dir"/n*.pid)
"$cluster" stop "$dir" || fail "stop"
[[ -e $dir ]] && fail "stop left $dir"
for p in $pids; do
  [[ -r /proc/$p/stat && $(cut -d' ' -f3 /proc/$p/stat) != Z ]] && fail "stop left nats-server pid $p"
done
finish "nats-cluster start/kill leader/restart/stop"
