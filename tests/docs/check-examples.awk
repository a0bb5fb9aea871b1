# Checks the q command lines of examples against the CLI: every q invocation
# must name existing (sub)commands and only options of that command or global
# ones. Reads the spec of scripts/cli-spec, then lines "WHERE<TAB>SHELL TEXT";
# prints one line per problem, "WHERE: ...".
#
#   awk -F'\t' -f check-examples.awk SPEC EXAMPLES
#
# The shell is read roughly: single-quoted text is one word, double quotes are
# dropped, comments go, and $( ( ) | ; & ` < > end a command. A q invocation is
# a word "q" (or ".../q", or "X=.../q" as in ExecStart=) where a command starts,
# or after sudo, exec, xargs, watch, env, nice, nohup, time or timeout.
FNR == NR {
  if ($1 == "cmd") known[$2] = 1
  if ($1 == "sub") { child[$2 SUBSEP $3] = 1; hassubs[$2] = 1 }
  if ($1 == "opt") {
    n = split($3, names, ",")
    for (i = 1; i <= n; i++) {
      name = names[i]; sub(/\{(true|false)\}$/, "", name)
      opt[$2 SUBSEP name] = $5
    }
  }
  next
}
function tokenize(s,    n) {
  gsub(/'[^']*'/, "S", s)
  gsub(/"/, "", s)
  sub(/(^|[ \t])#.*$/, "", s)
  gsub(/\$\(/, " ; ", s)
  gsub(/[()|;&`<>]/, " ; ", s)
  return split(s, tok, /[ \t]+/)
}
function is_q(t) { return t ~ /^([A-Za-z_][A-Za-z0-9_]*=)?([^ ]*\/)?q$/ }
function problem(msg) { print where ": " msg; bad++ }
# Checks the q invocation whose arguments start at token i; returns the index
# of the token that ends it.
function check_q(i, n,    path, npos, t, name, flags) {
  path = "q"; npos = 0
  for (; i <= n && tok[i] != ";"; i++) {
    t = tok[i]
    if (t == "") continue
    if (t == "--") { for (; i <= n && tok[i] != ";"; i++); return i }
    if (t ~ /^-./) {
      name = t
      if (name ~ /^--/) sub(/=.*/, "", name)
      else if (length(name) > 2) name = substr(name, 1, 2)   # -fFILE, -n5
      if ((path SUBSEP name) in opt) flags = opt[path SUBSEP name]
      else if (("q" SUBSEP name) in opt) flags = opt["q" SUBSEP name]
      else { problem("'" path "' has no option " name); continue }
      if (flags ~ /v/ && t !~ /=/ && !(t ~ /^-[^-]/ && length(t) > 2)) i++
      continue
    }
    if (hassubs[path] && npos == 0) {
      if (path == "q" && t == "help") continue   # q help [COMMAND...]
      if ((path SUBSEP t) in child) { path = path " " t; continue }
      if (t ~ /^[a-z]/) problem("'" path "' has no command " t)
      return skip(i, n)
    }
    npos++
  }
  return i
}
function skip(i, n) { for (; i <= n && tok[i] != ";"; i++); return i }
{
  where = $1
  text = $0; sub(/^[^\t]*\t/, "", text)
  n = tokenize(text)
  start = 1; wrapped = 0
  for (i = 1; i <= n; i++) {
    t = tok[i]
    if (t == "") continue
    if (t == ";") { start = 1; wrapped = 0; continue }
    if (start) {
      if (t ~ /^(if|then|else|elif|do|while|until|!|\{|\}|time)$/) continue
      if (t ~ /^[A-Za-z_][A-Za-z0-9_]*=/ && !is_q(t)) continue
      start = 0
      if (is_q(t)) { i = check_q(i + 1, n); start = 1; continue }
      if (t ~ /^(sudo|exec|xargs|watch|env|nice|nohup|timeout)$/) wrapped = 1
      continue
    }
    if (wrapped && is_q(t)) { i = check_q(i + 1, n); start = 1; wrapped = 0 }
  }
}
END { exit bad > 0 }
