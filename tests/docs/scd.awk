# Reads a man page in scdoc (man/*.scd) and prints what the docs tests
# compare with the CLI, tab-separated, one item a line:
#   opt  PATH  NAMES  LABEL  LINE   an option entry of OPTIONS (NAMES sorted,
#                                   comma-separated; LABEL "-" for a flag);
#                                   "## dlq list" in OPTIONS switches PATH
#   syn  WORD                       an underlined word of SYNOPSIS
#   cmd  NAME  LINE                 an entry of COMMANDS ("*create* ...")
#   env  NAME                       an entry of ENVIRONMENT
#   exit CODE  LINE                 a code of EXIT STATUS (table or entries)
#   ref  NAME  SECTION  LINE        a reference *NAME*(SECTION)
#   bold TEXT  LINE                 a bold span outside code blocks
#   code LINE  TEXT                 a line of a code block, unescaped
#   section NAME
# Usage: awk -v base="q dlq" -f scd.awk man/q-dlq.1.scd
function unescape(s) {
  gsub(/\\\\/, "\002", s)
  gsub(/\\/, "", s)
  gsub(/\002/, "\\", s)
  return s
}
BEGIN { OFS = "\t"; path = base; incode = 0; section = "" }
{
  raw = $0
  if (raw ~ /^[ \t]*```/) {
    incode = !incode
    pending = ""
    next
  }
  if (incode) {
    text = unescape(raw)
    if (text ~ /\\$/) { pending = pending substr(text, 1, length(text) - 1) " "; next }
    print "code", FNR, pending text
    pending = ""
    next
  }
  if (raw ~ /^# /) {
    section = substr(raw, 3)
    path = base
    print "section", section
    next
  }
  if (raw ~ /^## /) {
    if (section == "OPTIONS") path = "q " substr(raw, 4)
    next
  }
  # \* is a literal star and \_ a literal underscore: out of the way of the markup.
  s = raw
  gsub(/\\\\/, "\002", s)
  gsub(/\\\*/, "\001", s)
  gsub(/\\_/, "\003", s)
  # Bold spans.
  rest = s
  while (match(rest, /\*[^*]+\*/)) {
    b = substr(rest, RSTART + 1, RLENGTH - 2)
    before = RSTART > 1 ? substr(rest, RSTART - 1, 1) : " "
    after = substr(rest, RSTART + RLENGTH)
    gsub(/\001/, "*", b); gsub(/\003/, "_", b); gsub(/\002/, "\\", b)
    # A span glued to a word (_FILE_*-lock*) is a suffix, not a name.
    if (before !~ /[A-Za-z0-9_]/) print "bold", b, FNR
    if (match(after, /^\([0-9][a-z]*\)/)) print "ref", b, substr(after, 2, RLENGTH - 2), FNR
    rest = after
  }
  if (section == "OPTIONS" && s ~ /^\*-/) {
    names = ""; label = "-"; rest = s; n = 0
    while (match(rest, /^(, |\/)?\*-[^*]*\*/)) {
      b = substr(rest, RSTART, RLENGTH); sub(/^(, |\/)?\*/, "", b); sub(/\*$/, "", b)
      list[++n] = b
      rest = substr(rest, RSTART + RLENGTH)
    }
    # Sort the names (few: insertion sort).
    for (i = 2; i <= n; i++) { v = list[i]; for (j = i - 1; j >= 1 && list[j] > v; j--) list[j + 1] = list[j]; list[j + 1] = v }
    for (i = 1; i <= n; i++) names = names (i > 1 ? "," : "") list[i]
    if (match(rest, /^ _[^_]+_/)) {
      label = substr(rest, RSTART + 2, RLENGTH - 3)
      gsub(/\003/, "_", label); gsub(/\001/, "*", label); gsub(/\002/, "\\", label)
    }
    print "opt", path, names, label, FNR
  }
  if (section == "SYNOPSIS") {
    rest = s
    while (match(rest, /(^|[^A-Za-z0-9])_[^_ ]+_/)) {
      u = substr(rest, RSTART, RLENGTH); sub(/^[^_]*_/, "", u); sub(/_$/, "", u)
      gsub(/\003/, "_", u)
      print "syn", u
      rest = substr(rest, RSTART + RLENGTH)
    }
  }
  if (section == "COMMANDS" && match(s, /^\*[a-z][a-z0-9-]*\*/))
    print "cmd", substr(s, 2, RLENGTH - 2), FNR
  if (section == "ENVIRONMENT" && s ~ /^\*/) {
    rest = s
    while (match(rest, /^(, )?\*[^*]+\*/)) {
      b = substr(rest, RSTART, RLENGTH); sub(/^(, )?\*/, "", b); sub(/\*$/, "", b)
      gsub(/\003/, "_", b)
      if (b ~ /^[A-Z_][A-Z0-9_]*$/) print "env", b
      rest = substr(rest, RSTART + RLENGTH)
    }
  }
  if (section == "EXIT STATUS") {
    if (match(s, /^[\[|][\[|]? +[0-9]+ *$/) || match(s, /^[\[|] +[0-9]+$/)) {
      c = s; gsub(/[^0-9]/, "", c); print "exit", c, FNR
    } else if (s ~ /^\*[0-9]+\*/) {
      rest = s
      while (match(rest, /^(, )?\*[0-9]+\*/)) {
        c = substr(rest, RSTART, RLENGTH); gsub(/[^0-9]/, "", c); print "exit", c, FNR
        rest = substr(rest, RSTART + RLENGTH)
      }
    }
  }
}
