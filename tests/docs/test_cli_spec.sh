#!/usr/bin/env bash
# scripts/cli-spec, which every docs test relies on, reads CLI11's help format
# right: a fake q prints help with the hard cases (heads longer than the
# column, a one-space pad, validators, value sets, negated flags, REQUIRED,
# repeats, description continuations, nested subcommands, footer notes), and
# the spec must be exactly what it says. A line it cannot read is an error,
# never a shorter list. Then the real q: every command and subcommand has a
# help, and its options look like options.
source "$(dirname "$0")/lib.sh" "$@"

fake=$T/fake-q
cat >"$fake" <<'FAKE'
#!/usr/bin/env bash
footer='
Queue file: -f/--file, else $Q_FILE, else
  ${XDG_DATA_HOME:-$HOME/.local/share}/q/default.q

Exit codes:
   0  success
   2  partial
      (check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)
  64  usage error

Environment: Q_FILE, Q_NO_SYNC=1, XDG_DATA_HOME.
Run '"'"'q COMMAND --help'"'"' for a command'"'"'s options.'
case "$*" in
  --help) cat <<'EOF'
fake: a test CLI.
Usage: q [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit
  -f,--file PATH              Queue file (default: $Q_FILE)
  --no-sync                   No sync

Subcommands:
  alpha                       Do alpha things: the first. Exit 3 if stale
  grp                         A group of commands
EOF
  ;;
  "alpha --help") cat <<'EOF'
Do alpha things: the first. Exit 3 if stale
Usage: q alpha [OPTIONS] NAME [REST...]

Positionals:
  NAME TEXT REQUIRED          The name
  REST TEXT ...               The rest

Options:
  -h,--help                   Print this help message and exit
  -n,--max N:INT in [1 - 10000]
                              Up to N (default 1)
  --at TIME Excludes: --delay Visible at TIME
  --delay DUR Excludes: --at  Visible after DUR
  --mode MODE:{fast,slow}     How: fast or slow
  --lines Excludes: --null --dedup-id
                              One per line
                              and more about it
  --fifo,--standard{false}    The kind
  --by DUR REQUIRED           Required; counted from now
  --attr KEY=VALUE ...        Repeatable
  --max-dead [W,]C            Thresholds like 0,10
  --json                      JSON
EOF
  ;;
  "grp --help") cat <<'EOF'
A group of commands
Usage: q grp [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit

Subcommands:
  one                         The first one
EOF
  ;;
  "grp one --help") cat <<'EOF'
The first one
Usage: q grp one [OPTIONS] QUEUE

Positionals:
  QUEUE TEXT REQUIRED         A queue

Options:
  -h,--help                   Print this help message and exit
EOF
  ;;
  *) echo "fake-q: unexpected $*" >&2; exit 64 ;;
esac
printf '%s\n' "$footer"
FAKE
chmod +x "$fake"

"$SRC/scripts/cli-spec" "$fake" >"$T/got" 2>"$T/err" || die "cli-spec failed on the fake: $(cat "$T/err")"
tab=$'\t'
cat >"$T/want" <<EOF
cmd${tab}q${tab}fake: a test CLI.
opt${tab}q${tab}-h,--help${tab}-${tab}-${tab}-${tab}-${tab}Print this help message and exit
opt${tab}q${tab}-f,--file${tab}PATH${tab}v${tab}-${tab}-${tab}Queue file (default: \$Q_FILE)
opt${tab}q${tab}--no-sync${tab}-${tab}-${tab}-${tab}-${tab}No sync
sub${tab}q${tab}alpha${tab}Do alpha things: the first. Exit 3 if stale
sub${tab}q${tab}grp${tab}A group of commands
exit${tab}0${tab}success
exit${tab}2${tab}partial
exitnote${tab}(check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)
exit${tab}64${tab}usage error
env${tab}Q_FILE
env${tab}Q_NO_SYNC
env${tab}XDG_DATA_HOME
cmd${tab}q alpha${tab}Do alpha things: the first. Exit 3 if stale
pos${tab}q alpha${tab}NAME${tab}-${tab}r${tab}The name
pos${tab}q alpha${tab}REST${tab}-${tab}m${tab}The rest
opt${tab}q alpha${tab}-h,--help${tab}-${tab}-${tab}-${tab}-${tab}Print this help message and exit
opt${tab}q alpha${tab}-n,--max${tab}N${tab}v${tab}-${tab}-${tab}Up to N (default 1)
opt${tab}q alpha${tab}--at${tab}TIME${tab}v${tab}-${tab}--delay${tab}Visible at TIME
opt${tab}q alpha${tab}--delay${tab}DUR${tab}v${tab}-${tab}--at${tab}Visible after DUR
opt${tab}q alpha${tab}--mode${tab}MODE${tab}v${tab}fast,slow${tab}-${tab}How: fast or slow
opt${tab}q alpha${tab}--lines${tab}-${tab}-${tab}-${tab}--null --dedup-id${tab}One per line and more about it
opt${tab}q alpha${tab}--fifo,--standard{false}${tab}-${tab}-${tab}-${tab}-${tab}The kind
opt${tab}q alpha${tab}--by${tab}DUR${tab}rv${tab}-${tab}-${tab}Required; counted from now
opt${tab}q alpha${tab}--attr${tab}KEY=VALUE${tab}mv${tab}-${tab}-${tab}Repeatable
opt${tab}q alpha${tab}--max-dead${tab}[W,]C${tab}v${tab}-${tab}-${tab}Thresholds like 0,10
opt${tab}q alpha${tab}--json${tab}-${tab}-${tab}-${tab}-${tab}JSON
cmd${tab}q grp${tab}A group of commands
opt${tab}q grp${tab}-h,--help${tab}-${tab}-${tab}-${tab}-${tab}Print this help message and exit
sub${tab}q grp${tab}one${tab}The first one
cmd${tab}q grp one${tab}The first one
pos${tab}q grp one${tab}QUEUE${tab}-${tab}r${tab}A queue
opt${tab}q grp one${tab}-h,--help${tab}-${tab}-${tab}-${tab}-${tab}Print this help message and exit
EOF
diff -u "$T/want" "$T/got" >"$T/diff" || fail "cli-spec read the fake help wrong:
$(cat "$T/diff")"

# Strict: a head it cannot read is an error (exit 2), naming the line.
sed 's/^  --json                      JSON$/  --json MODE junk            JSON/' "$fake" >"$T/bad-q"
chmod +x "$T/bad-q"
"$SRC/scripts/cli-spec" "$T/bad-q" >/dev/null 2>"$T/err"
rc=$?
((rc == 2)) || fail "cli-spec accepted an option line it cannot read (exit $rc)"
grep -q 'unexpected word junk' "$T/err" || fail "cli-spec did not name what it could not read: $(cat "$T/err")"

# The real q: the spec is sound.
[[ $(awk -F'\t' '$1 == "cmd"' "$SPEC" | wc -l) -ge 10 ]] || fail "cli-spec found fewer than 10 commands in $Q"
awk -F'\t' '$1 == "opt" && $3 !~ /^-/ { print }' "$SPEC" | grep . && fail "an option name without a dash"
while IFS= read -r path; do
  opt_names "$path" | grep -qx -- --help || fail "'$path' has no --help"
done < <(paths)
awk -F'\t' '$1 == "exit"' "$SPEC" | grep -q $'^exit\t0\t' || fail "no exit codes in the footer of q --help"
