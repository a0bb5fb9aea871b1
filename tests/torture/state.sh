# State helpers for the file-level scenarios (crash sweep, I/O errors,
# corruption). Sourced after lib.sh.
#
#   make_base FILE        a queue file with a little of everything: queue t (visible,
#                         in-flight and delayed messages), queue d (a dead letter);
#                         leaves the receipt of an in-flight message of t in $T/receipt
#   dump FILE             the file's logical content, one line per fact: queues,
#                         per-queue counts and counters, every message (id, body,
#                         receive count, state, and its times as @MS: sent, visible
#                         at (delay), lease end, last received, so a half-done
#                         extend or nack shows), every dead letter, and what
#                         `q verify` says. Prints "ERROR exit N: ..." when q cannot
#                         read it. Compare two dumps with `same_state`.
#   same_state WANT GOT SHIFT_MS SLACK_MS
#                         GOT (a dump) is WANT, its times equal or moved by SHIFT_MS
#                         (+- SLACK_MS) where the command set them (state_cmp.py)
#   file_ok FILE          LMDB can walk every page (mdb_dump) and q can write to it
#   sweep_command NAME FILE
#                         ARGS=(q's arguments) and $T/stdin for command NAME of the
#                         sweeps on FILE (a copy of make_base's file; ack, nack and
#                         extend use its receipt); returns 1 for an unknown NAME

sweep_command() {
  local name=$1 f=$2
  : >"$T/stdin"
  case $name in
    send) ARGS=(-f "$f" send t "sweep-body") ;;
    # Not -q: a failed command must print nothing, which -q would make vacuous.
    send-lines) seq -f 'line-%g' 1 200 >"$T/stdin"; ARGS=(-f "$f" send t --lines) ;;
    send-big) head -c 300000 /dev/zero | tr '\0' x >"$T/stdin"; ARGS=(-f "$f" send t) ;;
    receive) ARGS=(-f "$f" receive t -n 2) ;;
    ack) ARGS=(-f "$f" ack t "$(<"$T/receipt")") ;;
    nack) ARGS=(-f "$f" nack t "$(<"$T/receipt")" --json) ;;
    extend) ARGS=(-f "$f" extend t "$(<"$T/receipt")" --by 2h) ;;
    create-fresh) ARGS=(-f "$f" create fresh) ;;
    create) ARGS=(-f "$f" create u --max-receives 9) ;;
    redrive) ARGS=(-f "$f" redrive d) ;;
    purge) ARGS=(-f "$f" purge t) ;;
    delete) ARGS=(-f "$f" delete t) ;;
    dlq-purge) ARGS=(-f "$f" dlq purge d) ;;
    config) ARGS=(-f "$f" config t --max-receives 7) ;;
    *) return 1 ;;
  esac
}

make_base() {
  local f=$1
  (
    export Q_FILE=$f
    "$Q" create t --visibility-timeout 1h --max-receives 5 &&
      "$Q" create d --max-receives 1 &&
      printf 'a\nb\nc\nd\n' | "$Q" send t --lines -q &&
      "$Q" send t delayed --delay 1h -q &&
      "$Q" receive t --json | jq -r .receipt >"$T/receipt" &&
      "$Q" send d poison -q &&
      "$Q" receive d --visibility-timeout 0 >/dev/null &&
      { "$Q" receive d >/dev/null; [[ $? == 1 ]]; } &&
      [[ $("$Q" stats d --json | jq .dead) == 1 ]]
  ) || die "make_base: could not build the base file"
}

dump() {
  local f=$1 queue out rc
  export Q_FILE_DUMP=$f
  out=$("$Q" -f "$f" list 2>&1)
  rc=$?
  if ((rc != 0)); then echo "ERROR exit $rc: $out"; return; fi
  echo "queues: $(tr '\n' ' ' <<<"$out")"
  for queue in $out; do
    "$Q" -f "$f" stats "$queue" --json 2>&1 |
      jq -c '{queue,visible,in_flight,delayed,dead,sent,received,acked,nacked,dead_lettered,redriven}' 2>&1 ||
      echo "ERROR stats $queue"
    "$Q" -f "$f" config "$queue" --json 2>&1 || echo "ERROR config $queue"
    "$Q" -f "$f" peek "$queue" -n 100000 --json 2>&1 |
      jq -c 'def ms: if . == null then null
                     else "@\((.[0:19] + "Z" | fromdateiso8601) * 1000 + (.[20:23] | tonumber))" end;
             [.id,(.body // .body_base64),.receive_count,.state,
              (.sent_at | ms),(.visible_at | ms),(.visible_until | ms),(.last_received_at | ms)]' 2>&1 ||
      echo "ERROR peek $queue"
    "$Q" -f "$f" dlq list "$queue" -n 100000 --json 2>&1 |
      jq -c '["dead",.id,(.body // .body_base64),.receive_count]' 2>&1 ||
      echo "ERROR dlq $queue"
  done
  # The indexes and counters agree with the records (a half-done write that the
  # listings above do not show).
  "$Q" -f "$f" verify >/dev/null 2>&1
  echo "verify: exit $?"
}

same_state() {
  local want=$1 got=$2
  [[ $want == "$got" ]] && return 0
  python3 "$TORTURE_DIR/state_cmp.py" <(printf '%s\n' "$want") <(printf '%s\n' "$got") "$3" "$4"
}

file_ok() {
  local f=$1 out
  out=$(mdb_dump -n -a "$f" 2>&1 >/dev/null) || { echo "mdb_dump: $out"; return 1; }
  out=$("$Q" -f "$f" send ok-check "after-$RANDOM" --create 2>&1) || { echo "q send afterwards: $out"; return 1; }
  return 0
}
