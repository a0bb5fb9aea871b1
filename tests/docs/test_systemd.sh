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
# - every service is sandboxed: `systemd-analyze security --offline=true`
#   rates its exposure 3.0 or below; q-work@ and q-drain@ run as the user q
#   (declared in systemd/q.sysusers, which systemd-sysusers accepts), with
#   StateDirectory=q (mode 2770, as every unit with StateDirectory=q has),
#   UMask=0007 and the hardening the README lists, yet keep
#   the network (no PrivateNetwork=, IPAddressDeny=; AF_INET, AF_INET6 and
#   AF_UNIX allowed) and /var/lib/q writable for their handlers;
# - q-stats.service skips its run (ExecCondition= exits 1) instead of failing
#   while the queue file does not exist; with a nats:// or tls:// Q_FILE,
#   q-stats-nats.service runs instead (with the network q-stats.service has
#   not), and the same for q-prometheus.
# Running the units under systemd is test_systemd_live.sh (it needs systemd as
# PID 1 and root).
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

# The sandbox: every service 3.0 or below.
for u in "$units"/*.service; do
  name=$(basename "$u")
  SYSTEMD_LOG_COLOR=0 systemd-analyze security --offline=true "$u" >"$T/security" 2>&1
  level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p' "$T/security")
  if [[ -z $level ]]; then
    fail "$name: systemd-analyze security gave no exposure level: $(tail -n 3 "$T/security")"
    continue
  fi
  echo "$name: exposure $level"
  awk -v l="$level" 'BEGIN { exit !(l <= 3.0) }' ||
    fail "$name: exposure $level, above 3.0; what is open: $(grep '^- ' "$T/security" | awk '{ print $2 }' | head -n 20 | paste -sd' ')"
done
# setting UNIT KEY: the values of KEY= in UNIT, a line each.
setting() { sed -n "s/^$2=//p" "$1"; }
has() { # has UNIT KEY VALUE: one KEY= line of UNIT is VALUE
  setting "$1" "$2" | grep -qxF -- "$3" || fail "$(basename "$1"): no $2=$3"
}
users=$(awk '$1 == "u" { print $2 }' "$SRC/systemd/q.sysusers")
for u in "$units"/q-work@.service "$units"/q-drain@.service "$units"/q-stats.service; do
  n=$(basename "$u")
  user=$(setting "$u" User)
  [[ -n $user && $user != root ]] || fail "$n: runs as root (no User=)"
  grep -qxF -- "$user" <<<"$users" || fail "$n: User=$user is not made by systemd/q.sysusers"
  has "$u" StateDirectory q
  has "$u" UMask 0007
  # Set-group-ID: a member's new file belongs to the group q (issue 25 item 16).
  has "$u" StateDirectoryMode 2770
  has "$u" ProtectSystem strict
  setting "$u" ReadWritePaths | tr ' ' '\n' | grep -qx /var/lib/q || fail "$n: /var/lib/q not in ReadWritePaths="
  for kv in PrivateTmp=yes NoNewPrivileges=yes RestrictSUIDSGID=yes ProtectKernelTunables=yes \
    ProtectKernelModules=yes ProtectKernelLogs=yes ProtectControlGroups=yes PrivateDevices=yes; do
    has "$u" "${kv%%=*}" "${kv#*=}"
  done
  setting "$u" SystemCallFilter | head -n 1 | grep -qx '@system-service' ||
    fail "$n: SystemCallFilter= does not start from @system-service"
done
# Every unit that shares StateDirectory=q (q-serve and the NATS ones too) keeps
# its set-group-ID bit: systemd re-modes /var/lib/q to the StateDirectoryMode=
# of whichever unit starts, so one 0770 would drop the bit for all.
for u in "$units"/*.service; do
  setting "$u" StateDirectory | grep -qx q || continue
  has "$u" StateDirectoryMode 2770
done
for u in "$units"/q-work@.service "$units"/q-drain@.service; do
  # Handlers keep the network and read the home directories.
  n=$(basename "$u")
  has "$u" ProtectHome read-only
  [[ -z $(setting "$u" PrivateNetwork) && -z $(setting "$u" IPAddressDeny) ]] ||
    fail "$n: cuts the handlers' network (PrivateNetwork= or IPAddressDeny=)"
  families=$(setting "$u" RestrictAddressFamilies | tr ' ' '\n')
  for fam in AF_UNIX AF_INET AF_INET6; do
    grep -qx "$fam" <<<"$families" || fail "$n: RestrictAddressFamilies= lacks $fam"
  done
done
grep -qx 'd /var/lib/q 2770 q q -' "$SRC/systemd/q.tmpfiles" ||
  fail "q.tmpfiles: /var/lib/q is not 2770 (set-group-ID, group q)"
# systemd-sysusers makes the user from systemd/q.sysusers (in a scratch root).
mkdir -p "$T/sysroot/etc"
systemd-sysusers --root="$T/sysroot" "$SRC/systemd/q.sysusers" >"$T/sysusers" 2>&1 ||
  fail "systemd-sysusers rejects systemd/q.sysusers: $(cat "$T/sysusers")"
for user in $users; do
  grep -q "^$user:x:[0-9]*:[0-9]*:[^:]*:/var/lib/q:" "$T/sysroot/etc/passwd" ||
    fail "systemd-sysusers did not make the user $user with home /var/lib/q: $(cat "$T/sysroot/etc/passwd" 2>&1)"
done

# q-stats and q-prometheus come in pairs (issue 27 item 6): NAME.service for
# a queue file, without the network, and NAME-nats.service for a nats:// or
# tls:// Q_FILE, with it; the timer starts NAME.service, which starts the other
# (Wants=). Each one's ExecCondition= passes for its kind of location only and
# skips (exits 1-254, not a failure) otherwise; the file one also while the
# file does not exist. The condition is run as systemd runs it: $$ is $, and
# Q_FILE comes from the environment.
: >"$T/present.q"
run_cond() { # UNIT Q_FILE: the exit status of UNIT's ExecCondition=
  local cond
  cond=$(setting "$1" ExecCondition | sed 's/\$\$/$/g')
  [[ -n $cond ]] || { echo 255; return; }
  Q_FILE=$2 bash -c "$cond" >/dev/null 2>&1
  echo $?
}
skips() { (($1 >= 1 && $1 <= 254)); }
for name in q-stats q-prometheus; do
  f=$units/$name.service n=$units/$name-nats.service
  [[ -f $n ]] || { fail "no $name-nats.service"; continue; }
  has "$f" PrivateNetwork yes
  has "$f" IPAddressDeny any
  has "$f" RestrictAddressFamilies AF_UNIX
  has "$f" Wants "$name-nats.service"
  [[ -z $(setting "$n" PrivateNetwork) && -z $(setting "$n" IPAddressDeny) ]] ||
    fail "$name-nats.service: no network (PrivateNetwork= or IPAddressDeny=)"
  has "$n" RestrictAddressFamilies "AF_UNIX AF_INET AF_INET6"
  [[ $(setting "$f" ExecStart) == "$(setting "$n" ExecStart)" ]] ||
    fail "$name-nats.service runs another command than $name.service"
  same_but='^(#|Description=|After=|Wants=|ExecCondition=|PrivateNetwork=|IPAddressDeny=|RestrictAddressFamilies=)'
  [[ $(grep -vE "$same_but" "$f") == "$(grep -vE "$same_but" "$n")" ]] ||
    fail "$name-nats.service differs from $name.service in more than the network and its condition"
  rc=$(run_cond "$f" "$T/present.q")
  ((rc == 0)) || fail "$name.service: ExecCondition= exits $rc for an existing file"
  rc=$(run_cond "$f" "$T/none.q")
  skips "$rc" || fail "$name.service: ExecCondition= exits $rc for a missing file (1-254 skips)"
  rc=$(run_cond "$n" "$T/present.q")
  skips "$rc" || fail "$name-nats.service: ExecCondition= exits $rc for a file (1-254 skips)"
  for loc in nats://127.0.0.1:4222/jobs tls://a:4222,b:4222/jobs nats://user:pw@h:4222/x; do
    rc=$(run_cond "$f" "$loc")
    skips "$rc" || fail "$name.service: ExecCondition= exits $rc for $loc (it has no network: 1-254 skips)"
    rc=$(run_cond "$n" "$loc")
    ((rc == 0)) || fail "$name-nats.service: ExecCondition= exits $rc for $loc"
  done
done

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
