#!/usr/bin/env bash
# `cmake --install` puts q, the man pages, the completions and the systemd
# units in the standard places (GNUInstallDirs, prefix /usr here):
#   usr/bin/q, and usr/bin/q-nats when the NATS backend is built (with
#   usr/share/man/man1/q-nats.1.gz, a link to q.1.gz)
#   usr/share/man/man1/q.1.gz, q-COMMAND.1.gz for every command; man7/q.7.gz
#   usr/share/bash-completion/completions/q
#   usr/share/zsh/vendor-completions/_q
#   usr/share/fish/vendor_completions.d/q.fish
#   usr/lib/systemd/system/q-work@.service, ... with ExecStart=/usr/bin/q
#   usr/lib/sysusers.d/q.conf, usr/lib/tmpfiles.d/q.conf (the user q, /var/lib/q),
#   usr/lib/tmpfiles.d/q-prometheus.conf (q may write the textfile directory)
# and nothing else; the pages are the built ones and read with man -l.
source "$(dirname "$0")/lib.sh" "$@"
need gzip gzip
need man man-db

root=$T/root
DESTDIR=$root cmake --install "$BUILD" --prefix /usr >"$T/log" 2>&1 ||
  die "cmake --install failed: $(tail -n 20 "$T/log")"

want=$T/want
qnats=$(dirname "$Q")/q-nats
{
  echo usr/bin/q
  [[ -x $qnats ]] && echo usr/bin/q-nats
  [[ -x $(dirname "$Q")/q-serve ]] && echo usr/bin/q-serve
  echo usr/share/man/man1/q.1.gz
  echo usr/share/man/man7/q.7.gz
  for c in $(subs q); do echo "usr/share/man/man1/q-$c.1.gz"; done
  echo usr/share/bash-completion/completions/q
  echo usr/share/zsh/vendor-completions/_q
  echo usr/share/fish/vendor_completions.d/q.fish
  for u in "$SRC"/systemd/*.service.in "$SRC"/systemd/*.timer; do
    echo "usr/lib/systemd/system/$(basename "$u" .in)"
  done
  echo usr/lib/sysusers.d/q.conf
  echo usr/lib/tmpfiles.d/q.conf
  echo usr/lib/tmpfiles.d/q-prometheus.conf
} | sort >"$want"
(cd "$root" && find . -type f | sed 's|^\./||' | sort) >"$T/got"
same_set "installed files" "$(cat "$want")" "$(cat "$T/got")" >/dev/null

[[ -x $root/usr/bin/q ]] || fail "usr/bin/q is not executable"
cmp -s "$root/usr/bin/q" "$Q" || fail "usr/bin/q is not the built q"
if [[ -x $qnats ]]; then
  cmp -s "$root/usr/bin/q-nats" "$qnats" || fail "usr/bin/q-nats is not the built q-nats"
  [[ $(readlink "$root/usr/share/man/man1/q-nats.1.gz") == q.1.gz ]] ||
    fail "usr/share/man/man1/q-nats.1.gz is not a link to q.1.gz"
fi
cmp -s "$root/usr/share/bash-completion/completions/q" "$SRC/completions/q.bash" ||
  fail "the installed bash completion is not completions/q.bash"
cmp -s "$root/usr/share/zsh/vendor-completions/_q" "$SRC/completions/_q" ||
  fail "the installed zsh completion is not completions/_q"
cmp -s "$root/usr/share/fish/vendor_completions.d/q.fish" "$SRC/completions/q.fish" ||
  fail "the installed fish completion is not completions/q.fish"

# The units name the installed q, and nothing is left to fill in.
for u in "$root"/usr/lib/systemd/system/*; do
  grep -q '@[A-Z_]*@' "$u" && fail "$(basename "$u"): an unfilled @PLACEHOLDER@"
  if grep -q '^ExecStart=' "$u"; then
    grep -q '^ExecStart=/usr/bin/q ' "$u" || fail "$(basename "$u"): ExecStart does not run /usr/bin/q"
  fi
done

# The pages are gzip'd troff that man reads.
for page in "$root"/usr/share/man/man*/*.gz; do
  gzip -t "$page" || { fail "$page: not gzip"; continue; }
  MANWIDTH=80 man -l "$page" 2>"$T/err" | grep -q '^NAME' || fail "man -l $(basename "$page") shows no NAME"
done
MANWIDTH=80 man -l "$root/usr/share/man/man1/q.1.gz" 2>/dev/null | grep -q -- '--lock-timeout' ||
  fail "q(1) as installed does not document --lock-timeout"
