#!/usr/bin/env bash
# Scenario 10, two users in one group share a queue file (a setgid directory of
# the group). With umask 007 both can send, receive and ack each other's
# messages. With umask 022 (the file and its lock file 0644) the second user
# either can, or gets exit 77 with a message that names the file that lacks the
# permission (the queue file, or its lock file FILE-lock) and says that write
# permission is missing. Users are switched with setpriv (uids 40001/40002,
# group 40000; no accounts needed); the test needs root for that.
source "$(dirname "$0")/lib.sh" "$@"
[[ $(id -u) == 0 ]] || skip "multi_user needs uid 0 (to act as two users with setpriv); run it as root"
command -v setpriv >/dev/null || missing "setpriv is required (Debian: util-linux)"

G=40000
as_a() { setpriv --reuid=40001 --regid=$G --groups=$G "$@"; }
as_b() { setpriv --reuid=40002 --regid=$G --groups=$G "$@"; }
chmod 755 "$T"
S=$T/shared
mkdir -p "$S" && chown root:$G "$S" && chmod 2775 "$S"

# ---- umask 007: both users work -------------------------------------------------------
F=$S/q007
(umask 007; as_a "$Q" -f "$F" create t) || fail "umask 007: user A cannot create"
(
  umask 007
  as_a "$Q" -f "$F" send t from-a >/dev/null || echo "A send" >>"$T/bad"
  as_b "$Q" -f "$F" send t from-b >/dev/null || echo "B send" >>"$T/bad"
  got_b=$(as_b "$Q" -f "$F" receive t --json) || echo "B receive" >>"$T/bad"
  got_a=$(as_a "$Q" -f "$F" receive t --json) || echo "A receive" >>"$T/bad"
  as_b "$Q" -f "$F" ack t "$(jq -r .receipt <<<"$got_b")" || echo "B ack" >>"$T/bad"
  as_a "$Q" -f "$F" ack t "$(jq -r .receipt <<<"$got_a")" || echo "A ack" >>"$T/bad"
  [[ $(jq -r .body <<<"$got_b") == from-a && $(jq -r .body <<<"$got_a") == from-b ]] ||
    echo "bodies: B got $(jq -r .body <<<"$got_b"), A got $(jq -r .body <<<"$got_a")" >>"$T/bad"
)
[[ -s $T/bad ]] && fail "umask 007: these failed for the second user or the first: $(xargs <"$T/bad")"
for f in "$F" "$F-lock"; do
  [[ $(stat -c %a "$f") == 660 ]] || fail "umask 007: $(basename "$f") has mode $(stat -c %a "$f"), expected 660"
done

# ---- umask 022: B works, or is told exactly what is missing ------------------------------
# exact_or_works LABEL FILE_LACKING: B's send and receive either work, or exit 77
# naming FILE_LACKING and write permission.
exact_or_works() {
  local label=$1 lacking=$2 cmd rc
  for cmd in "send t from-b" "receive t" "stats"; do
    read -r -a argv <<<"$cmd"
    (umask 022; as_b "$Q" -f "$F" "${argv[@]}") >"$T/out" 2>"$T/err"
    rc=$?
    ((rc == 0 || rc == 1)) && continue
    if ((rc != 77)); then
      fail "$label: user B's q $cmd exited $rc, expected 0 or 77: $(<"$T/err")"
      continue
    fi
    # A command that only reads (stats) opens the file read-only: what it
    # lacks is write permission on the lock file (LMDB's reader table).
    local need=$lacking
    [[ $cmd == stats ]] && need=$F-lock
    grep -qF "$need:" "$T/err" ||
      fail "$label: user B's q $cmd: the message does not name $(basename "$need"), the file that lacks the permission: $(<"$T/err")"
    grep -qi "write" "$T/err" ||
      fail "$label: user B's q $cmd: the message does not say that write permission is missing: $(<"$T/err")"
  done
}

F=$S/q022
(umask 022; as_a "$Q" -f "$F" create t && as_a "$Q" -f "$F" send t from-a >/dev/null) ||
  fail "umask 022: user A cannot create and send"
exact_or_works "umask 022 (file and lock file 0644)" "$F"
# The group may write the queue file, but not its lock file.
chmod g+w "$F"
exact_or_works "umask 022, queue file made group-writable, lock file 0644" "$F-lock"
# Both group-writable: now B works.
chmod g+w "$F-lock"
(umask 022; as_b "$Q" -f "$F" send t from-b) >/dev/null 2>"$T/err" ||
  fail "umask 022 after chmod g+w on both files: user B still cannot send: $(<"$T/err")"
echo "multi_user: umask 007 shared use works; umask 022 errors checked"
