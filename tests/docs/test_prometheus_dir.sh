#!/usr/bin/env bash
# q-prometheus.service can write Debian's node_exporter textfile directory
# (issue 27 item 6). Debian's prometheus-node-exporter ships
# /var/lib/prometheus/node-exporter as root:root 0755 (dpkg -c of
# prometheus-node-exporter_1.5.0-1+b6: drwxr-xr-x root/root), which the user q
# cannot write (exit 77). Checked:
# - both Prometheus units run systemd/q-prometheus.tmpfiles
#   (tmpfiles.d/q-prometheus.conf) as root before q, and may write the
#   directory (ReadWritePaths=);
# - the tmpfiles line adds an ACL entry for the user q on that directory;
# - in a scratch root holding the directory as Debian ships it, the writer
#   (q stats --prometheus --output, as a user that is not root, standing in
#   for q) is refused (77) before systemd-tmpfiles applied the line, and
#   writes q.prom after it; the directory stays root's.
source "$(dirname "$0")/lib.sh" "$@"
need systemd-tmpfiles systemd
need setpriv util-linux

tf=$SRC/systemd/q-prometheus.tmpfiles
line=$(grep -v '^#' "$tf" | grep .)
[[ $line == 'a+ /var/lib/prometheus/node-exporter - - - - u:q:rwx' ]] ||
  fail "q-prometheus.tmpfiles: not the ACL line for the user q on the textfile directory: '$line'"
for u in q-prometheus q-prometheus-nats; do
  f=$SRC/systemd/$u.service.in
  grep -qxF 'ExecStartPre=+/usr/bin/systemd-tmpfiles --create q-prometheus.conf' "$f" ||
    fail "$u.service: no ExecStartPre=+ applying q-prometheus.conf"
  sed -n 's/^ReadWritePaths=//p' "$f" | tr ' ' '\n' | grep -qx -- -/var/lib/prometheus/node-exporter ||
    fail "$u.service: the textfile directory is not in ReadWritePaths="
  grep -qx 'Environment=Q_PROM=/var/lib/prometheus/node-exporter/q.prom' "$f" ||
    fail "$u.service: Q_PROM is not in Debian's textfile directory"
  grep -qx 'User=q' "$f" || fail "$u.service: not User=q"
done
grep -q 'q-prometheus.tmpfiles DESTINATION lib/tmpfiles.d RENAME q-prometheus.conf' "$SRC/systemd/CMakeLists.txt" ||
  fail "systemd/CMakeLists.txt does not install q-prometheus.tmpfiles as tmpfiles.d/q-prometheus.conf"

if ((EUID != 0)); then
  echo "$TEST_NAME: skipped: running the writer as another user needs root" >&2
  [[ -s $_FAILS ]] && exit 1
  exit 77
fi
# A uid that is nobody's on this machine stands in for q (with --root,
# systemd-tmpfiles does not look user names up in the scratch root, so the
# copy names the uid).
uid=64917
getent passwd "$uid" >/dev/null && die "uid $uid is taken here"
chmod 755 "$T"
r=$T/root
dir=$r/var/lib/prometheus/node-exporter
mkdir -p "$dir" "$r/usr/lib/tmpfiles.d" "$T/qdata"
chown root:root "$r/var/lib/prometheus" "$dir"
chmod 0755 "$r/var/lib/prometheus" "$dir"
chown "$uid:$uid" "$T/qdata"
as_q() { setpriv --reuid "$uid" --regid "$uid" --clear-groups -- "$@"; }
as_q "$Q" -f "$T/qdata/jobs.q" create jobs >/dev/null || die "cannot make a queue as uid $uid"
writer() { as_q "$Q" -f "$T/qdata/jobs.q" stats --prometheus --output "$dir/q.prom" >"$T/out" 2>&1; }
writer
rc=$?
((rc == 77)) || fail "before the ACL: the writer exited $rc, not 77 (is the directory as Debian ships it?): $(cat "$T/out")"
sed "s/u:q:/u:$uid:/" "$tf" >"$r/usr/lib/tmpfiles.d/q-prometheus.conf"
systemd-tmpfiles --root="$r" --create q-prometheus.conf >"$T/tmpfiles" 2>&1 ||
  fail "systemd-tmpfiles failed: $(cat "$T/tmpfiles")"
writer || fail "after the ACL: the writer exited $?: $(cat "$T/out")"
grep -q '^q_messages{file=' "$dir/q.prom" 2>/dev/null || fail "no q.prom with the metrics in the directory"
# Still root's (the group bits now show the ACL's mask, rwx; the group root
# itself keeps r-x in the ACL, and others r-x).
[[ $(stat -c '%U:%G %A' "$dir") == 'root:root drwxrwxr-x' ]] ||
  fail "the directory is no longer Debian's root:root with an ACL: $(stat -c '%U:%G %A' "$dir")"
[[ $(stat -c '%a' "$dir/q.prom") == 644 ]] || fail "q.prom is not readable by node_exporter: mode $(stat -c %a "$dir/q.prom")"
# Applied again (each run does it), nothing changes and nothing fails.
systemd-tmpfiles --root="$r" --create q-prometheus.conf >"$T/tmpfiles" 2>&1 ||
  fail "systemd-tmpfiles failed the second time: $(cat "$T/tmpfiles")"
writer || fail "the second run: the writer exited $?: $(cat "$T/out")"
