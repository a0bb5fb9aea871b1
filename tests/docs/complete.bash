#!/usr/bin/env bash
# Asks bash what the q completion offers, as readline would call it:
#
#   bash --norc --noprofile complete.bash COMPLETION_FILE < LINES
#
# Each line of LINES is a command line, the cursor at its end; for each,
# prints the line, then every word of COMPREPLY, one a line, prefixed by "  ",
# then "--end". The line is split into COMP_WORDS as readline does with the
# default COMP_WORDBREAKS for what q's lines contain: at blanks, with "=" a
# word of its own.
set -u
file=${1:?usage: complete.bash COMPLETION_FILE < LINES}
# shellcheck source=/dev/null
source "$file"

spec=$(complete -p q 2>/dev/null) || { echo "complete.bash: $file does not register a completion for q" >&2; exit 2; }
func=$(sed -n 's/.*-F \([^ ]*\) .*/\1/p' <<<"$spec")
[[ -n $func ]] || { echo "complete.bash: no completion function in: $spec" >&2; exit 2; }

while IFS= read -r line; do
  printf '%s\n' "$line"
  words=()
  read -ra raw <<<"$line"
  for w in "${raw[@]}"; do
    if [[ $w == ?*=* ]]; then
      words+=("${w%%=*}" "=")
      [[ -n ${w#*=} ]] && words+=("${w#*=}")
    else
      words+=("$w")
    fi
  done
  [[ $line == *' ' || ${#words[@]} -eq 0 ]] && words+=("")
  COMP_WORDS=("${words[@]}")
  COMP_CWORD=$((${#words[@]} - 1))
  COMP_LINE=$line
  COMP_POINT=${#line}
  COMP_TYPE=9
  COMPREPLY=()
  "$func" q "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]-}"
  for r in "${COMPREPLY[@]}"; do printf '  %s\n' "$r"; done
  echo "--end"
done
