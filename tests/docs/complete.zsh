#!/usr/bin/env zsh
# Asks a real interactive zsh what it completes, through a pseudo-terminal:
#
#   zsh complete.zsh FPATH_DIR < LINES
#
# FPATH_DIR holds the _q completion. Each line of LINES is a command line, the
# cursor at its end; for each, prints the line, then every match zsh's
# completion system offers, one a line, prefixed by "  ", then "--end".
# Matches are captured where they are added (compadd), so menus, grouping and
# terminal width do not matter.
emulate -L zsh
zmodload zsh/zpty || { print -u2 "complete.zsh: no zsh/zpty module"; exit 2 }
local dir=${1:?usage: complete.zsh FPATH_DIR < LINES}

local setup
setup=$(cat <<'SETUP'
PS1='' PS2='' RPROMPT='' PROMPT_EOL_MARK=''
unsetopt beep auto_list auto_menu list_ambiguous
LISTMAX=1000000
HISTFILE=/dev/null
fpath=(@DIR@ $fpath)
autoload -Uz compinit && compinit -u -D
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
zstyle ':completion:*' menu no
bindkey '^U' kill-whole-line
# Every match that completion adds is printed between markers: the real
# compadd does the matching (-A collects the matches instead of adding them).
compadd() {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
    builtin compadd "$@"
    return
  fi
  local -a __hits
  builtin compadd -A __hits "$@"
  local m
  for m in $__hits; do print -r -- "<m>$m</m>"; done
  builtin compadd "$@"
}
_q_test_complete() { _main_complete "$@"; print -r -- "<end/>" }
zle -C q-test-complete complete-word _q_test_complete
bindkey '^I' q-test-complete
print -r -- "<rea""dy/>"
SETUP
)
setup=${setup//@DIR@/${(q)dir}}

zpty -b z zsh -f -i || exit 2
{
  local line out
  # Send the setup as one line per command.
  local l
  for l in ${(f)setup}; do zpty -w z "$l"; done
  # Wait until it ran (the echo of the command does not match: quotes).
  zpty -r z out '*<ready/>*' || { print -u2 "complete.zsh: zsh did not start"; exit 2 }
  local cmdline rest
  while IFS= read -r cmdline; do
    print -r -- "$cmdline"
    zpty -w -n z "$cmdline"$'\t'
    zpty -r z out '*<end/>*' || { print -u2 "complete.zsh: no answer for: $cmdline"; exit 2 }
    rest=$out
    while [[ $rest == *'<m>'*'</m>'* ]]; do
      rest=${rest#*<m>}
      print -r -- "  ${rest%%</m>*}"
      rest=${rest#*</m>}
    done
    print -r -- "--end"
    zpty -w -n z $'\C-u'
  done
} always {
  zpty -d z
}
