#!/usr/bin/env bash
# The man pages (man/*.scd) against `q --help` and `q CMD --help`:
# - every command has its page man/q-CMD.1.scd, and every page a command;
# - each page's OPTIONS lists exactly the options of its command (and of its
#   subcommands, under "## SUBCOMMAND" headings), with the value names the
#   CLI shows; its SYNOPSIS names every positional;
# - q.1 lists every command under COMMANDS and SEE ALSO, documents the global
#   options, the exit codes and the environment variables of the help footer;
# - no page names a command, option or exit code the CLI does not know: not in
#   bold text, not in references like *q-send*(1), not in the examples (every
#   q command line of a code block is checked).
source "$(dirname "$0")/lib.sh" "$@"
MAN=$SRC/man
[[ -d $MAN ]] || die "no man/ directory in $SRC"

root_subs=$(subs q)

# Every command has a page, and every page a command.
for c in $root_subs; do
  [[ -f $MAN/q-$c.1.scd ]] ||
    fail "'q $c' has no man page: write man/q-$c.1.scd (like man/q-send.1.scd) and add it to man/CMakeLists.txt"
done
for page in "$MAN"/q-*.1.scd; do
  c=$(basename "$page" .1.scd)
  c=${c#q-}
  grep -qxF -- "$c" <<<"$root_subs" ||
    fail "man/q-$c.1.scd documents 'q $c', which 'q --help' does not know"
done

# Known exit codes: the help footer's (with its notes, like "2 CRITICAL"), and
# those that command descriptions name ("Exit 3 if ...").
footer_codes=$(awk -F'\t' '$1 == "exit" { print $2 }' "$SPEC")
noted_codes=$(awk -F'\t' '$1 == "exitnote" { print $2 }' "$SPEC" | grep -oE '\b[0-9]+ [A-Z]' | grep -oE '^[0-9]+' || true)
described_codes=$(awk -F'\t' '$1 == "cmd" || $1 == "sub" { print $NF }' "$SPEC" |
  grep -oiE 'exit (status )?[0-9]+( (and|or) [0-9]+|, [0-9]+)*|[0-9]+ if any' | grep -oE '[0-9]+' || true)
known_codes=$(printf '%s\n%s\n%s\n' "$footer_codes" "$noted_codes" "$described_codes" | sed '/^$/d' | sort -un)
all_options=$(awk -F'\t' '$1 == "opt" { n = $3; gsub(/\{(true|false)\}/, "", n); print n }' "$SPEC" |
  tr ',' '\n' | sort -u)

# "NAMES<TAB>LABEL" of a command path, the names sorted as the page parser does.
want_options() {
  opt_entries "$1" | while IFS=$'\t' read -r names label flags; do
    printf '%s\t%s\n' "$(tr ',' '\n' <<<"$names" | sort | paste -sd, -)" "$label"
  done | sort
}
check_page() {   # FILE BASE_PATH
  local page=$1 base=$2 name items
  name=$(basename "$page")
  items=$T/$name.items
  awk -v base="$base" -f "$SRC/tests/docs/scd.awk" "$page" >"$items"

  # Options, for the command and each of its subcommands.
  local p want got
  while IFS= read -r p; do
    [[ $p == "$base" || $p == "$base "* ]] || continue
    [[ $base == q && $p != q ]] && continue   # q.1 documents the global options only
    want=$(want_options "$p")
    got=$(awk -F'\t' -v p="$p" 'BEGIN { OFS = "\t" } $1 == "opt" && $2 == p { print $3, $4 }' "$items" | sort)
    if ! same_set "man/$name: OPTIONS of '$p'" "$want" "$got" >/dev/null; then
      comm -23 <(echo "$want") <(echo "$got") | while IFS=$'\t' read -r names label; do
        local where=''
        [[ $p != "$base" ]] && where=" (## ${p#q })"
        echo "  man/$name: add under OPTIONS$where:" >&2
        awk -F'\t' -v p="$p" -v want="$names" '
          $1 == "opt" && $2 == p {
            n = $3; gsub(/\{(true|false)\}/, "", n)
            k = split(n, a, ","); s = ""
            for (i = 1; i <= k; i++) s = s (i > 1 ? ", " : "") "*" a[i] "*"
            if ($4 != "-") s = s " _" $4 "_"
            printf "    %s\n    \t%s\n", s, $8
          }' "$SPEC" | grep -A1 -F -- "*${names##*,}*" | head -n 2 >&2
      done
    fi
    # Positionals in the SYNOPSIS.
    local pos
    for pos in $(positionals "$p"); do
      grep -qxF -- "syn	$pos" "$items" || fail "man/$name: SYNOPSIS does not name _${pos}_ of '$p'"
    done
  done < <(paths)
  # Options of commands the CLI does not have.
  awk -F'\t' '$1 == "opt" { print $2 }' "$items" | sort -u | while IFS= read -r p; do
    grep -qxF -- "$p" <(paths) || fail "man/$name: documents options of '$p', which the CLI does not have"
  done

  # Exit codes.
  local c
  for c in $(awk -F'\t' '$1 == "exit" { print $2 }' "$items"); do
    grep -qx -- "$c" <<<"$known_codes" || fail "man/$name: EXIT STATUS names $c, which q does not use"
  done

  # References to command pages.
  awk -F'\t' '$1 == "ref" && $2 ~ /^q-/ && $3 == "1" { print substr($2, 3), $4 }' "$items" |
    while read -r c line; do
      grep -qxF -- "$c" <<<"$root_subs" || fail "man/$name:$line: *q-$c*(1) names a command that does not exist"
    done

  # Bold options must exist somewhere; bold q command lines and the examples
  # must be valid command lines.
  awk -F'\t' '$1 == "bold" && $2 ~ /^-/ { print $2 "\t" $3 }' "$items" |
    while IFS=$'\t' read -r text line; do
      for o in $(tr '/,' '  ' <<<"$text"); do
        [[ $o == -* && $o != - && $o != -- ]] || continue
        o=${o%%=*}
        grep -qxF -- "$o" <<<"$all_options" || fail "man/$name:$line: *$text* is no option of q"
      done
    done
  {
    awk -F'\t' -v f="man/$name" '$1 == "bold" { print f ":" $3 "\t" $2 }' "$items"
    awk -F'\t' -v f="man/$name" '$1 == "code" { t = $0; sub(/^code\t[^\t]*\t/, "", t); print f ":" $2 "\t" t }' "$items"
  } >"$T/$name.examples"
  awk -F'\t' -f "$SRC/tests/docs/check-examples.awk" "$SPEC" "$T/$name.examples" >"$T/$name.bad" ||
    while IFS= read -r l; do fail "$l"; done <"$T/$name.bad"
}

check_page "$MAN/q.1.scd" q
for page in "$MAN"/q-*.1.scd; do
  c=$(basename "$page" .1.scd)
  c=${c#q-}
  grep -qxF -- "$c" <<<"$root_subs" && check_page "$page" "q $c"
done
check_page "$MAN/q.7.scd" q7

# q(1): the command list, SEE ALSO, exit codes and environment of the footer.
items=$T/q.1.scd.items
same_set "man/q.1.scd: COMMANDS" "$root_subs" "$(awk -F'\t' '$1 == "cmd" { print $2 }' "$items")" >/dev/null
for c in $root_subs; do
  grep -qP "^ref\tq-$c\t1\t" "$items" || fail "man/q.1.scd: does not refer to *q-$c*(1)"
done
page_codes=$(awk -F'\t' '$1 == "exit" { print $2 }' "$items")
for c in $footer_codes; do
  grep -qx -- "$c" <<<"$page_codes" || fail "man/q.1.scd: EXIT STATUS lacks $c, which 'q --help' lists"
done
for v in $(awk -F'\t' '$1 == "env" { print $2 }' "$SPEC"); do
  grep -qxF -- "env	$v" "$items" || fail "man/q.1.scd: ENVIRONMENT lacks $v, which 'q --help' names"
done

# Each page's EXIT STATUS names only codes its command can return (the exit
# codes `q cli-spec` gives for it, which its --help shows), and every default
# an option entry states is the default its --help states.
for page in "$MAN"/q-*.1.scd; do
  c=$(basename "$page" .1.scd)
  c=${c#q-}
  grep -qxF -- "$c" <<<"$root_subs" || continue
  name=$(basename "$page")
  can=$(awk -F'\t' -v p="q $c" '$1 == "cexit" && ($2 == p || index($2, p " ") == 1) { print $3 }' "$SPEC" | sort -un)
  for code in $(awk -F'\t' '$1 == "exit" { print $2 }' "$T/$name.items"); do
    grep -qx -- "$code" <<<"$can" ||
      fail "man/$name: EXIT STATUS names $code, but 'q $c --help' does not list it (exit codes in cli/help.cpp)"
  done
  # "*--max-size* _BYTES_" then its indented text: "... (default 1048576)".
  awk '
    /^\*-/ { flush(); head = $0; text = ""; next }
    /^\t/ && head != "" { text = text " " $0; next }
    { flush() }
    END { flush() }
    function flush(   n) {
      gsub(/[ \t]+/, " ", text)
      if (head != "" && match(text, /\(default:? [^;,)]+/)) {
        d = substr(text, RSTART, RLENGTH); sub(/^\(default:? /, "", d)
        n = head; gsub(/[*_]/, "", n); sub(/ .*/, "", n); sub(/,$/, "", n)
        gsub(/\\/, "", d); gsub(/[ \t]+/, " ", d); sub(/ $/, "", d)
        printf "%s\t%s\n", n, d
      }
      head = ""; text = ""
    }' "$page" | while IFS=$'\t' read -r opt want; do
    got=$(awk -F'\t' -v p="q $c" -v o="$opt" '
      $1 == "default" && ($2 == p || index($2, p " ") == 1) {
        k = split($3, ns, ","); for (i = 1; i <= k; i++) if (ns[i] == o) print $4 }' "$SPEC")
    [[ -n $got ]] || { fail "man/$name: $opt: the page says default $want, --help states none"; continue; }
    grep -qxF -- "$want" <<<"$got" || fail "man/$name: $opt: the page says default '$want', --help says '$(head -1 <<<"$got")'"
  done
done
