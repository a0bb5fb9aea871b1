#!/usr/bin/env bash
# The completions in completions/ are what completions/generate makes from the
# built q's --help: a command, option or value set added, renamed or removed in
# the CLI fails here until the completions are regenerated.
source "$(dirname "$0")/lib.sh" "$@"

"$SRC/completions/generate" "$Q" "$T/new" >"$T/log" 2>&1 ||
  die "completions/generate failed: $(cat "$T/log")"
for f in q.bash _q q.fish; do
  if ! diff -u "$SRC/completions/$f" "$T/new/$f" >"$T/diff"; then
    fail "completions/$f differs from what 'q --help' says; run: completions/generate $Q (or make completions)"
    head -n 40 "$T/diff" >&2
  fi
done

# The generated files are valid in their shells.
bash -n "$SRC/completions/q.bash" || fail "completions/q.bash: bash syntax error"
need zsh zsh
need fish fish
zsh -n "$SRC/completions/_q" || fail "completions/_q: zsh syntax error"
fish -n "$SRC/completions/q.fish" || fail "completions/q.fish: fish syntax error"
