#!/usr/bin/env bash
# The machine spec of the command line (`q cli-spec`, hidden) and the help
# that renders the same description for people:
# - scripts/cli-spec turns the JSON into the exact tab lines every docs test
#   and completions/generate read (a fake q with the hard cases);
# - the real spec is sound: commands, options with dashes, --help everywhere,
#   exit codes per command, the hidden command not listed;
# - every command's --help starts with its usage, lists each of its options
#   and the global ones, exactly the exit codes the spec gives it, fits 80
#   columns when not on a terminal, and shows no CLI11 artefacts;
# - `q help CMD` is `q CMD --help`; parse errors say "q CMD: ..." and point to
#   "q CMD --help"; q check answers every failure with UNKNOWN on stdout.
source "$(dirname "$0")/lib.sh" "$@"
need jq jq

fake=$T/fake-q
cat >"$fake" <<'FAKE'
#!/usr/bin/env bash
[[ $1 == cli-spec ]] || { echo "fake-q: unexpected $*" >&2; exit 64; }
cat <<'JSON'
{"name": "q", "path": "q", "description": "fake: a test CLI.", "usage": "q [OPTIONS] COMMAND",
 "positionals": [],
 "options": [
  {"names": ["-h", "--help"], "value_name": null, "type": "flag", "required": false, "repeatable": false,
   "choices": [], "excludes": [], "default": null, "description": "Print this help message and exit"},
  {"names": ["-f", "--file"], "value_name": "PATH", "type": "path", "required": false, "repeatable": false,
   "choices": [], "excludes": [], "default": null, "description": "Queue file"}],
 "exit_codes": [{"code": 0, "meaning": "success"}, {"code": 64, "meaning": "usage error"}],
 "commands": [
  {"name": "alpha", "path": "q alpha", "description": "Do alpha\tthings", "usage": "q alpha NAME",
   "positionals": [{"name": "NAME", "type": "text", "required": true, "repeatable": false, "description": "The name"},
                   {"name": "REST", "type": "text", "required": false, "repeatable": true, "description": ""}],
   "options": [
    {"names": ["-n", "--max"], "value_name": "N", "type": "count", "required": true, "repeatable": false,
     "choices": [], "excludes": [], "default": "1", "description": "Up to N (default 1)"},
    {"names": ["--mode"], "value_name": "fast|slow", "type": "choice", "required": false, "repeatable": true,
     "choices": ["fast", "slow"], "excludes": ["--at", "--delay"], "default": null, "description": "How"}],
   "exit_codes": [{"code": 0, "meaning": "success"}, {"code": 3, "meaning": "stale"}],
   "commands": []}],
 "version": "0", "format_version": 1, "environment": ["Q_FILE"], "notes": ""}
JSON
FAKE
chmod +x "$fake"
"$SRC/scripts/cli-spec" "$fake" >"$T/got" 2>"$T/err" || die "cli-spec failed on the fake: $(cat "$T/err")"
tab=$'\t'
cat >"$T/want" <<WANT
cmd${tab}q${tab}fake: a test CLI.
opt${tab}q${tab}-h,--help${tab}-${tab}-${tab}-${tab}-${tab}Print this help message and exit
opt${tab}q${tab}-f,--file${tab}PATH${tab}v${tab}-${tab}-${tab}Queue file
sub${tab}q${tab}alpha${tab}Do alpha things
cexit${tab}q${tab}0${tab}success
cexit${tab}q${tab}64${tab}usage error
exit${tab}0${tab}success
exit${tab}64${tab}usage error
env${tab}Q_FILE
cmd${tab}q alpha${tab}Do alpha things
opt${tab}q alpha${tab}-n,--max${tab}N${tab}rv${tab}-${tab}-${tab}Up to N (default 1)
default${tab}q alpha${tab}-n,--max${tab}1
opt${tab}q alpha${tab}--mode${tab}fast|slow${tab}mv${tab}fast,slow${tab}--at --delay${tab}How
pos${tab}q alpha${tab}NAME${tab}text${tab}r${tab}The name
pos${tab}q alpha${tab}REST${tab}text${tab}m${tab}-
cexit${tab}q alpha${tab}0${tab}success
cexit${tab}q alpha${tab}3${tab}stale
WANT
diff -u "$T/want" "$T/got" >"$T/diff" || fail "cli-spec read the fake spec wrong:
$(cat "$T/diff")"
printf '#!/bin/sh\necho "{not json"\n' >"$T/bad-q"
chmod +x "$T/bad-q"
"$SRC/scripts/cli-spec" "$T/bad-q" >/dev/null 2>&1 && fail "cli-spec accepted a spec that is not JSON"

# The real q: the spec is sound.
"$Q" cli-spec | jq -e '.commands | length >= 10' >/dev/null || fail "q cli-spec: not JSON, or fewer than 10 commands"
awk -F'\t' '$1 == "opt" && $3 !~ /^-/ { print }' "$SPEC" | grep . && fail "an option name without a dash"
grep -q $'^sub\tq\tcli-spec\t' "$SPEC" && fail "the hidden cli-spec command is listed"
"$Q" --help | grep -q cli-spec && fail "q --help shows the hidden cli-spec command"
awk -F'\t' '$1 == "exit"' "$SPEC" | grep -q $'^exit\t0\t' || fail "no exit codes in the spec of q"

# Every command's help: usage first, its options, the globals, its exit codes.
while IFS= read -r path; do
  opt_names "$path" | grep -qx -- --help || fail "'$path' has no --help"
  read -ra words <<<"${path#q}"
  help=$("$Q" "${words[@]}" --help </dev/null) || fail "'$path --help' failed"
  [[ $(head -1 <<<"$help") == "Usage: $path"* ]] || fail "'$path --help' does not start with its usage: $(head -1 <<<"$help")"
  for o in $(opt_names "$path"); do
    grep -qE -- "(^|[ ,])$o( |,|$)" <<<"$help" || fail "'$path --help' does not show $o"
  done
  if [[ $path != q ]]; then
    for o in -f --file --no-sync --lock-timeout; do
      grep -qE -- "(^|[ ,])$o( |,|$)" <<<"$help" || fail "'$path --help' does not list the global option $o"
    done
  fi
  want=$(awk -F'\t' -v p="$path" '$1 == "cexit" && $2 == p { print $3 }' "$SPEC")
  got=$(awk '/^Exit status:/ { on = 1; next } on && /^$/ { on = 0 } on && /^ +[0-9]+  / { print $1 }' <<<"$help")
  same_set "'$path --help': exit codes" "$want" "$got" >/dev/null
  long=$(awk 'length > 80' <<<"$help")
  [[ -z $long ]] || fail "'$path --help' is wider than 80 columns off a terminal: $long"
  for artefact in ':{' 'UINT' '18446744073709551615' 'Excludes:' 'Needs:' 'REQUIRED'; do
    grep -qF -- "$artefact" <<<"$help" && fail "'$path --help' shows the CLI11 artefact '$artefact'"
  done
  [[ $("$Q" help "${words[@]}") == "$help" ]] || fail "'q help${path#q}' differs from '$path --help'"
done < <(paths)

# Parse errors: "q CMD: ..." pointing at "q CMD --help".
err=$("$Q" redrive 2>&1 >/dev/null)
rc=$?
((rc == 64)) || fail "q redrive without a queue: exit $rc, want 64"
[[ $err == "q redrive: "*"(see 'q redrive --help')" ]] || fail "q redrive parse error: $err"
err=$("$Q" dlq list --bogus x 2>&1 >/dev/null)
[[ $err == "q dlq list: "*"(see 'q dlq list --help')" ]] || fail "q dlq list parse error: $err"
err=$("$Q" nosuch 2>&1 >/dev/null)
[[ $err == "q: unknown command 'nosuch' (see 'q --help')" ]] || fail "unknown command: $err"
# q check is a monitoring plugin: UNKNOWN (3) on stdout, also for usage errors.
out=$("$Q" check --bogus 2>"$T/err")
rc=$?
((rc == 3)) || fail "q check --bogus: exit $rc, want 3 (UNKNOWN)"
[[ $out == "Q UNKNOWN - "* && ! -s $T/err ]] || fail "q check --bogus: stdout '$out', stderr '$(cat "$T/err")'"
"$Q" check -V | grep -q '^q check ' || fail "q check -V prints no version"
