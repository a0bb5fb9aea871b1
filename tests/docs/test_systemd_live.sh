#!/usr/bin/env bash
# q-work@.service under the real systemd: its handler, run as the user q in
# the unit's sandbox, can write into the state directory /var/lib/q and reach
# the network (a TCP listener on the loopback), and the unit stops cleanly.
#
# It needs systemd as PID 1 and root, and skips (exit 77) without them: in a
# container without systemd, test_systemd.sh checks the same settings offline.
# What it changes on the host, and undoes: a copy of the unit under a name of
# its own in /run/systemd/system (runtime: gone at reboot anyway), files under
# /run/q-live-test.*, and /var/lib/q/q-live-test.* ; it makes the user q with
# systemd-sysusers and /var/lib/q when they are missing and removes both
# afterwards in that case.
source "$(dirname "$0")/lib.sh" "$@"
need systemctl systemd
need systemd-sysusers systemd
need systemd-tmpfiles systemd
need python3 python3

if [[ ! -d /run/systemd/system ]] || [[ $(ps -p 1 -o comm= 2>/dev/null) != systemd ]]; then
  echo "test_systemd_live: skipped: systemd is not PID 1 here" >&2
  trap - EXIT
  rm -rf "$T"
  exit 77
fi
if (($(id -u) != 0)); then
  echo "test_systemd_live: skipped: starting system units needs root" >&2
  trap - EXIT
  rm -rf "$T"
  exit 77
fi

tag=q-live-test-$$
unit=$tag-work@.service
run=$(mktemp -d "/run/$tag.XXXXXX") || die "cannot make a directory in /run"
chmod 755 "$run"
made_user=0 made_dir=0
getent passwd q >/dev/null || made_user=1
[[ -e /var/lib/q ]] || made_dir=1
cleanup_live() {
  systemctl stop "$tag-work@$tag.service" >/dev/null 2>&1
  rm -f "/run/systemd/system/$unit"
  rm -rf "/run/systemd/system/$tag-work@$tag.service.d"
  systemctl daemon-reload
  [[ -n ${listener:-} ]] && kill "$listener" 2>/dev/null
  rm -rf "$run" /var/lib/q/"$tag".*
  ((made_dir)) && rm -rf /var/lib/q
  ((made_user)) && { userdel q 2>/dev/null; groupdel q 2>/dev/null; }
}
trap 'rc=$?; cleanup_live; (exit $rc); _cleanup' EXIT

# What the package's postinst does.
systemd-sysusers "$SRC/systemd/q.sysusers" || die "systemd-sysusers failed"
systemd-tmpfiles --create "$SRC/systemd/q.tmpfiles" || die "systemd-tmpfiles failed"
# q, the handler and its configuration where the user q can read them (the
# build tree may be in a home directory q cannot enter).
cp "$Q" "$run/q"
port_file=$run/port
got=$run/got
python3 - "$port_file" "$got" <<'EOF' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
s.settimeout(120)
c, _ = s.accept()
open(sys.argv[2], "wb").write(c.recv(100))
EOF
listener=$!
for _ in $(seq 100); do [[ -s $port_file ]] && break; sleep 0.05; done
port=$(cat "$port_file") || die "the listener did not start"
cat >"$run/handler" <<EOF
#!/bin/bash
# Writes the message into the state directory and sends it to the listener.
body=\$(cat)
echo "\$body" >/var/lib/q/$tag.out || exit 10
exec 3<>/dev/tcp/127.0.0.1/$port || exit 11
echo "\$body" >&3
EOF
chmod 755 "$run/handler"
cat >"$run/conf" <<EOF
Q_FILE=/var/lib/q/$tag.q
HANDLER=$run/handler
GRACE=5s
EOF

sed "s|@Q_BINARY@|$run/q|g" "$SRC/systemd/q-work@.service.in" >"/run/systemd/system/$unit"
# The configuration from $run instead of /etc/q/work.
mkdir -p "/run/systemd/system/$tag-work@$tag.service.d"
printf '[Service]\nEnvironmentFile=\nEnvironmentFile=%s\n' "$run/conf" \
  >"/run/systemd/system/$tag-work@$tag.service.d/test.conf"
systemctl daemon-reload
runuser -u q -- env Q_FILE="/var/lib/q/$tag.q" "$run/q" create "$tag" >/dev/null ||
  die "cannot create the queue as the user q"
systemctl start "$tag-work@$tag.service" || die "the unit does not start: $(systemctl status "$tag-work@$tag.service" 2>&1 | tail -n 5)"
Q_FILE=/var/lib/q/$tag.q "$run/q" send "$tag" "hello $tag" >/dev/null || die "cannot send"

for _ in $(seq $((200 * ${Q_TEST_TIME_SCALE:-1}))); do
  [[ -s $got && -s /var/lib/q/$tag.out ]] && break
  sleep 0.05
done
[[ $(cat /var/lib/q/$tag.out 2>/dev/null) == "hello $tag" ]] ||
  fail "the handler did not write into /var/lib/q: $(journalctl -u "$tag-work@$tag.service" -n 10 -o cat 2>&1)"
[[ $(cat "$got" 2>/dev/null) == "hello $tag" ]] ||
  fail "the handler did not reach the listener on 127.0.0.1:$port"
owner=$(stat -c %U "/var/lib/q/$tag.out")
[[ $owner == q ]] || fail "the handler ran as $owner, not q"
mode=$(stat -c %a "/var/lib/q/$tag.out")
[[ $mode == 660 ]] || fail "the handler's file has mode $mode, not 660 (UMask=0007)"
acked=$(Q_FILE=/var/lib/q/$tag.q "$run/q" stats "$tag" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["acked"])')
[[ $acked == 1 ]] || fail "the message was not acked (acked=$acked)"
systemctl stop "$tag-work@$tag.service"
result=$(systemctl show -p Result --value "$tag-work@$tag.service")
[[ $result == success ]] || fail "the unit stopped with Result=$result"
