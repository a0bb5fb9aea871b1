#!/usr/bin/env bash
# Every man page builds with scdoc and renders with groff without a warning;
# each has the sections a reader expects; q(7) covers the concepts the issue
# asks for; and the build tree has every page built (man/CMakeLists.txt).
source "$(dirname "$0")/lib.sh" "$@"
need scdoc scdoc
need groff groff-base
MAN=$SRC/man

has_sections() {   # ITEMS PAGE SECTION...
  local items=$1 page=$2 s
  shift 2
  for s in "$@"; do
    grep -qxF -- "section	$s" "$items" || fail "man/$page: no '# $s' section"
  done
}

for page in "$MAN"/*.scd; do
  name=$(basename "$page" .scd)           # q-send.1
  title=${name%.*}                        # q-send
  section=${name##*.}                     # 1
  out=$T/$name
  if ! scdoc <"$page" >"$out" 2>"$T/err"; then
    fail "man/$name.scd: scdoc: $(cat "$T/err")"
    continue
  fi
  head -n 20 "$page" | grep -qx "$title($section) .*\|$title($section)" ||
    fail "man/$name.scd: the first line is not '$title($section) ...'"
  # -ww: all warnings; -z: no output. A warning is a formatting mistake.
  groff -k -man -Tutf8 -ww -z "$out" 2>"$T/err"
  [[ -s $T/err ]] && fail "man/$name.scd: groff: $(head -n 5 "$T/err")"
  # The NAME line names the page.
  grep -A2 '^# NAME' "$page" | grep -q "^$title - " || fail "man/$name.scd: NAME is not '$title - ...'"

  awk -v base=q -f "$SRC/tests/docs/scd.awk" "$page" >"$T/$name.items"
  case $name in
    q.1) has_sections "$T/$name.items" "$name.scd" NAME SYNOPSIS DESCRIPTION OPTIONS COMMANDS \
           "QUEUE FILE" "EXIT STATUS" ENVIRONMENT FILES EXAMPLES "SEE ALSO" ;;
    q.7) has_sections "$T/$name.items" "$name.scd" NAME DESCRIPTION "VISIBILITY TIMEOUT" \
           "AT-LEAST-ONCE DELIVERY" "RECEIVE COUNTS AND THE DEAD-LETTER QUEUE" REDRIVE \
           "BACKOFF AND JITTER" "ORDERING AND FIFO GROUPS" "RATE AND DRAIN TIME" "SEE ALSO" ;;
    *) has_sections "$T/$name.items" "$name.scd" NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" \
         EXAMPLES "SEE ALSO" ;;
  esac
done

# q(7): the newcomer's page explains what the issue asks, with worked examples.
q7=$MAN/q.7.scd
for topic in 'idempotent' 'receive count' 'redrive' 'full jitter' 'drain time = backlog / (consumers \* rate per consumer)' \
  'sign-up rush' '10,000' '50 a second' 'FIFO' '--max-receives' '--dedup-id'; do
  grep -qF -- "$topic" "$q7" || fail "man/q.7.scd does not mention '$topic'"
done
[[ $(grep -c '^```' "$q7") -ge 12 ]] || fail "man/q.7.scd: fewer than 6 worked examples"

# q-work(1) documents the systemd units q ships.
for unit in "$SRC"/systemd/*.service.in "$SRC"/systemd/*.timer; do
  u=$(basename "$unit" .in)
  grep -qF -- "$u" "$MAN/q-work.1.scd" || fail "man/q-work.1.scd does not mention $u"
done

# The build made every page (when scdoc was there at configure time, as it is
# wherever scripts/bootstrap ran).
for page in "$MAN"/*.scd; do
  name=$(basename "$page" .scd)
  [[ -f $BUILD/man/$name.gz || -f $BUILD/man/$name ]] ||
    fail "the build did not make man/$name (is scdoc installed? re-run cmake)"
done
