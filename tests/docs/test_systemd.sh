#!/usr/bin/env bash
# The systemd units in systemd/:
# - `systemd-analyze verify` accepts them without a word (every directive
#   known, every value valid, ExecStart executable, the Documentation= man
#   pages present);
# - their q command lines are valid for this q (commands and options);
# - q-work@.service stops gracefully within TimeoutStopSec (KillMode=mixed, a
#   grace below the timeout), restarts on failure but not on usage errors;
# - what it promises holds for the real q: SIGTERM to `q work` lets a running
#   command finish within the grace and exits 0, or releases the message at
#   the end of the grace.
source "$(dirname "$0")/lib.sh" "$@"
need systemd-analyze systemd
need scdoc scdoc
need man man-db

units=$T/units
mkdir -p "$units" "$T/man/man1" "$T/man/man7"
for u in "$SRC"/systemd/*.service.in "$SRC"/systemd/*.timer; do
  sed "s|@Q_BINARY@|$Q|g" "$u" >"$units/$(basename "$u" .in)"
done
grep -l '@[A-Z_]*@' "$units"/* && fail "a unit has a placeholder that install-units.cmake does not fill"
for p in "$SRC"/man/*.scd; do
  n=$(basename "$p" .scd)
  scdoc <"$p" >"$T/man/man${n##*.}/$n" || fail "scdoc man/$n.scd"
done

# systemd-analyze verify: exit 0 and nothing said (warnings exit 0 too).
(cd "$units" && MANPATH=$T/man SYSTEMD_LOG_COLOR=0 systemd-analyze verify ./*) >"$T/verify" 2>&1
rc=$?
((rc == 0)) || fail "systemd-analyze verify exited $rc"
[[ -s $T/verify ]] && fail "systemd-analyze verify: $(cat "$T/verify")"

# The q command lines of ExecStart= (with a queue for %i).
grep -Hn '^ExecStart=' "$units"/* | sed 's/%i/emails/g; s/^\([^:]*:[0-9]*\):/\1\t/' >"$T/execs"
[[ -s $T/execs ]] || fail "no ExecStart= in the units"
awk -F'\t' -f "$SRC/tests/docs/check-examples.awk" "$SPEC" "$T/execs" >"$T/bad" ||
  while IFS= read -r l; do fail "$l"; done <"$T/bad"

# q-work@.service: the stop and restart policy the man page describes.
w=$units/q-work@.service
value() { sed -n "s/^$1=//p" "$w" | tail -n 1; }
[[ $(value KillMode) == mixed ]] || fail "q-work@.service: KillMode=mixed (the stop signal for q work only)"
[[ $(value Restart) == on-failure ]] || fail "q-work@.service: Restart=on-failure"
grep -qw 64 <<<"$(value RestartPreventExitStatus)" || fail "q-work@.service: RestartPreventExitStatus=64"
grep -qw 4 <<<"$(value SuccessExitStatus)" || fail "q-work@.service: SuccessExitStatus=4"
grace=$(sed -n 's/^Environment=GRACE=\([0-9]*\)s$/\1/p' "$w")
stop=$(value TimeoutStopSec)
stop=${stop%s}
[[ -n $grace && -n $stop ]] && ((grace < stop)) ||
  fail "q-work@.service: GRACE ($grace s) must be below TimeoutStopSec ($stop s)"
grep -q -- '--grace \${GRACE}' "$w" || fail "q-work@.service: ExecStart does not pass --grace \${GRACE}"

# The graceful stop, for real: what systemd does with KillMode=mixed is
# SIGTERM to q work alone.
export Q_FILE=$T/jobs.q
"$Q" create emails >/dev/null && "$Q" send emails fast >/dev/null || die "cannot set up a queue"
cat >"$T/handler" <<'EOF'
#!/bin/sh
body=$(cat)
[ "$body" = slow ] && sleep 30
exit 0
EOF
chmod +x "$T/handler"
"$Q" work emails --grace 1s -q -- "$T/handler" &
pid=$!
for _ in $(seq 50); do
  [[ $("$Q" stats emails --json | jq .acked) == 1 ]] && break
  sleep 0.1
done
"$Q" send emails slow >/dev/null
sleep 0.5
start=$(date +%s%N)
kill -TERM "$pid"
wait "$pid"
rc=$?
elapsed=$((($(date +%s%N) - start) / 1000000))
((rc == 0)) || fail "q work stopped by SIGTERM exited $rc, not 0"
((elapsed < 5000)) || fail "q work took ${elapsed}ms to stop with --grace 1s"
stats=$("$Q" stats emails --json)
[[ $(jq .acked <<<"$stats") == 1 && $(jq .visible <<<"$stats") == 1 && $(jq .in_flight <<<"$stats") == 0 ]] ||
  fail "after the stop, the unfinished message is not visible again at once: $stats"
