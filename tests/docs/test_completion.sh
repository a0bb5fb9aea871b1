#!/usr/bin/env bash
# Loads the completion of one shell in that real shell (bash, zsh or fish, as
# Debian ships them) and checks what it offers against `q --help`:
#
#   test_completion.sh SOURCE_DIR BUILD_DIR PATH_TO_q SHELL
#
# - `q CMD -` offers exactly the options of every command and subcommand;
# - `q ` and `q dlq ` offer exactly the subcommands;
# - a QUEUE positional or option value offers the queue names of the file:
#   $Q_FILE, or the -f/--file given earlier on the line (before or after the
#   command, --file=X too);
# - an option with a fixed set of values offers the set; one with a free value
#   (a duration) offers nothing, not the commands;
# - -f offers files; after `q work QUEUE --`, commands.
source "$(dirname "$0")/lib.sh" "$@"
SHELL_NAME=${4:?which shell: bash, zsh or fish}

case $SHELL_NAME in
  bash) need bash bash ;;
  zsh) need zsh zsh ;;
  fish) need fish fish ;;
  *) die "unknown shell $SHELL_NAME" ;;
esac

# Two queue files; the completions find q on PATH, as a user's shell would.
cd "$T" || die "cd $T"
"$Q" -f "$T/A.q" create alpha && "$Q" -f "$T/A.q" create beta && "$Q" -f "$T/B.q" create gamma ||
  die "cannot create the test queues"
export Q_FILE=$T/A.q
mkdir -p "$T/bin"
ln -s "$Q" "$T/bin/q"
export PATH=$T/bin:$PATH

# cases: "LINE<TAB>MODE<TAB>EXPECTED" (EXPECTED words separated by blanks);
# MODE "=" (exactly these) or "has" (at least these).
cases=$T/cases
: >"$cases"
add() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$cases"; }

while IFS= read -r path; do
  words=${path#q}
  add "q${words} -" = "$(opt_names "$path" | tr '\n' ' ')"
  s=$(subs "$path" | tr '\n' ' ')
  [[ -n $s ]] && add "q${words} " = "$s"
  first=$(positionals "$path" | head -n 1)
  [[ $first == QUEUE && -z $s ]] && add "q${words} " = "alpha beta"
  # Option values: fixed sets, queues, and a free value (nothing offered).
  while IFS=$'\t' read -r names label flags; do
    [[ $flags == *v* ]] || continue
    long=${names##*,}
    values=$(awk -F'\t' -v p="$path" -v n="$names" '$1 == "opt" && $2 == p && $3 == n { print $6 }' "$SPEC")
    prefix="q${words}"
    [[ $first == QUEUE ]] && prefix+=" alpha"
    if [[ $values != - ]]; then
      add "$prefix $long " = "${values//,/ }"
    elif [[ $label == QUEUE ]]; then
      add "$prefix $long " = "alpha beta"
    fi
  done < <(opt_entries "$path")
  if positionals "$path" | grep -qx COMMAND; then
    add "q${words} alpha -- tru" has "true"
  fi
done < <(paths)

add "q --lock-timeout " = ""
add "q cre" = "create"
add "q -f B.q send " = "gamma"
add "q --file B.q send " = "gamma"
add "q --file=B.q stats " = "gamma"
add "q send -f B.q " = "gamma"
add "q -fB.q send " = "gamma"
add "q --no-sync send " = "alpha beta"
add "q send alpha " = ""
add "q -f ./A." has "A.q"

# Ask the shell. The time limit is per command line asked (CASE_LIMIT seconds,
# default 60, times Q_TEST_TIME_SCALE), not for the whole run: a watchdog
# stops the shell only when it has not finished one more answer for that long,
# so a loaded machine makes the test slower, not failed, and a hang names the
# line it hung on. Progress is printed every 50 lines.
cut -f1 "$cases" >"$T/lines"
total=$(wc -l <"$T/lines")
CASE_LIMIT=$(( ${CASE_LIMIT:-60} * ${Q_TEST_TIME_SCALE:-1} ))
: >"$T/answers"
case $SHELL_NAME in
  bash) bash --norc --noprofile "$SRC/tests/docs/complete.bash" "$SRC/completions/q.bash" \
          <"$T/lines" >"$T/answers" & ;;
  zsh) zsh -f "$SRC/tests/docs/complete.zsh" "$SRC/completions" <"$T/lines" >"$T/answers" & ;;
  fish) HOME=$T fish --no-config "$SRC/tests/docs/complete.fish" "$SRC/completions" \
          <"$T/lines" >"$T/answers" & ;;
esac
shell_pid=$!
answered=0 last_change=$SECONDS reported=0
while kill -0 "$shell_pid" 2>/dev/null; do
  n=$(grep -c -- '^--end$' "$T/answers")
  if ((n != answered)); then
    answered=$n last_change=$SECONDS
    if ((answered >= reported + 50)); then
      reported=$answered
      echo "$SHELL_NAME: $answered of $total command lines answered (${SECONDS}s)" >&2
    fi
  elif ((SECONDS - last_change > CASE_LIMIT)); then
    kill "$shell_pid" 2>/dev/null
    die "$SHELL_NAME gave no answer in ${CASE_LIMIT}s for line $((answered + 1)) of $total: $(sed -n "$((answered + 1))p" "$T/lines")"
  fi
  sleep 0.1
done
wait "$shell_pid"
rc=$?
((rc == 0)) || die "$SHELL_NAME did not answer (exit $rc)"

# Check each answer.
n=0
while IFS=$'\t' read -r line mode want; do
  n=$((n + 1))
  got=$(awk -v want="$line" '
    !inside && $0 == want { inside = 1; next }
    inside && $0 == "--end" { exit }
    inside { sub(/^  /, ""); sub(/^\.\//, ""); print }' "$T/answers" | sort -u)
  want=$(tr ' ' '\n' <<<"$want" | sed '/^$/d' | sort -u)
  if [[ $mode == = ]]; then
    same_set "$SHELL_NAME: '$line'" "$want" "$got" >/dev/null
  else
    for w in $want; do
      grep -qxF -- "$w" <<<"$got" || fail "$SHELL_NAME: '$line': $w is not offered (got: $(echo $got))"
    done
  fi
done <"$cases"

echo "$SHELL_NAME: $n command lines checked"

# ---- an unreachable cluster: TAB answers within ~2 s ------------------------------------
# A listener that never answers (the kernel completes the TCP handshake, no
# NATS INFO ever comes): without a bound, q list waits its 10 s connect time.
# The time is the shell's whole run less a run that asks q nothing.
need python3 python3
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
sys.stdout.close()
time.sleep(600)' >"$T/port" &
silent_pid=$!
wait_port() { [[ -s $T/port ]]; }
for _ in $(seq 1 250); do wait_port && break; sleep 0.02; done
wait_port || die "the silent listener gave no port"
port=$(<"$T/port")
ask() { # LINE: the shell's answer to one line, timed (ms on fd 3)
  local start end
  start=$(date +%s%3N)
  case $SHELL_NAME in
    bash) printf '%s\n' "$1" | bash --norc --noprofile "$SRC/tests/docs/complete.bash" "$SRC/completions/q.bash" ;;
    zsh) printf '%s\n' "$1" | zsh -f "$SRC/tests/docs/complete.zsh" "$SRC/completions" ;;
    fish) printf '%s\n' "$1" | HOME=$T fish --no-config "$SRC/tests/docs/complete.fish" "$SRC/completions" ;;
  esac >/dev/null 2>&1
  end=$(date +%s%3N)
  echo $((end - start)) >&3
}
base=$(ask "q cre" 3>&1)
slow=$(ask "q -f nats://127.0.0.1:$port/ns send " 3>&1)
kill "$silent_pid" 2>/dev/null
wait "$silent_pid" 2>/dev/null
echo "$SHELL_NAME: a line without q list ${base} ms, queue names from a silent cluster ${slow} ms" >&2
# The bound is timeout(1)'s 1 s; an unbounded q list waits its 10 s connect time.
# On a loaded machine every shell start is slower (CI saw a plain line take 3.7 s),
# so the allowance grows with the measured base line, capped well under the 10 s
# an unbounded completion would add.
limit=$(( (2000 + base < 7000 ? 2000 + base : 7000) * ${Q_TEST_TIME_SCALE:-1} ))
(( slow - base <= limit )) ||
  fail "$SHELL_NAME: queue names from an unreachable cluster took $((slow - base)) ms more than a line without them (limit ${limit} ms): the completion's q list is not bounded"
