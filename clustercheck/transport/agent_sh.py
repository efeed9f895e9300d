"""The node side of a session: a POSIX shell loop that runs framed commands from stdin.

Started once per connection (the login shell and its rc files run once), it answers every
later command with no new exec of the login shell. It keeps the guard's promises (guard.py):
every command runs in a session and process group of its own (setsid), is killed at its
deadline (the tool sends K), and when stdin ends (the tool closed the channel, was killed, or
the connection dropped) every command group still alive is killed, TERM then KILL, and the
session's directory is removed. A connection can also vanish without its end reaching the node
(a host gone, a link cut, a tool stopped by a signal while the kernel keeps the socket): the tool
sends a heartbeat line every few seconds, and when no line at all came for LOST seconds ($3,
default 60) a watchdog ends every command and the loop by itself.

Requests, one line each (the tool's side is agent.py):
    R ID C 'quoted command'         run, the command inline (shell-quoted, newlines as "$N")
    R ID F LEN + LEN bytes          run, the command as a script of LEN bytes (long commands)
    S ID C|F ...                    start: stdout comes back line by line while it runs
    K ID                            kill command ID's group (its deadline passed, or stop)
    P ID LEN MODE 'name' + LEN bytes   write a file into the session's directory
    Q                               kill everything, remove the directory, answer @Z
    B                               heartbeat: the tool is still there (any line counts)
Answers (written by one emitter process, so frames never interleave):
    @H 1 DIR                        ready; DIR is the session's directory
    @R ID RC T + stdout M stderr M  a run ended (T=1: killed at its deadline), M = the marker
    @L ID + one line                a line of a started command's stdout
    @E ID RC + stderr M             a started command ended
    @P ID RC SIZE                   a file was written
    @Z                              everything is gone (after Q or the end of stdin)
Standard tools only: setsid, mkfifo, mktemp, head -c, cat, chmod, wc.
"""

AGENT = r'''
B=$1
LOST=${3:-60}
umask 077
trap '' PIPE
# What the loop relies on; without it the tool falls back to one exec per command. head -c
# matters most: a payload it did not consume would be read as requests.
{ command -v setsid && command -v mkfifo && head -c 0 </dev/null; } >/dev/null 2>&1 || {
  echo "clustercheck: setsid, mkfifo or head -c missing" >&2; exit 97; }
D=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/clustercheck.XXXXXXXX") || exit 97
A="$D/.agent"
if ! { mkdir "$A" && mkfifo "$A/q" && printf '\n@B%s\n' "$B" >"$A/b"; }; then rm -rf "$D"; exit 97; fi
N='
'
emitter() {
  while read -r k id rc t; do
    case $k in
      R) printf '@R %s %s %s\n' "$id" "$rc" "$t"; cat "$A/$id.o" "$A/b" "$A/$id.e" "$A/b"
         : >"$A/$id.o"; : >"$A/$id.e" ;;
      L) printf '@L %s\n' "$id"; cat "$A/$id.l$rc"; rm -f "$A/$id.l$rc" ;;
      E) printf '@E %s %s\n' "$id" "$rc"; cat "$A/$id.e" "$A/b"; : >"$A/$id.e" ;;
      P) printf '@P %s %s %s\n' "$id" "$rc" "$t" ;;
      H) printf '@H 1 %s\n' "$D" ;;
      Q) exit 0 ;;
    esac
  done
}
launch() {  # id how value: the command's group leader, its pid in $A/id.p
  trap - PIPE
  if [ "$2" = F ]; then set -- "$1" "$A/$1.c"; else set -- "$1" -c "$3"; fi
  setsid /bin/sh "$2" ${3+"$3"} </dev/null 2>"$A/$1.e" 4>&- 5<&- &
  p=$!
  echo "$p" >"$A/$1.p"
}
run_job() {
  exec >"$A/$1.o"
  launch "$@"
  wait "$p"; rc=$?
  kill -TERM -"$p" 2>/dev/null
  t=0; [ -f "$A/$1.t" ] && t=1
  rm -f "$A/$1.p" "$A/$1.c"
  echo "R $1 $rc $t" >&4
}
start_job() {
  mkfifo "$A/$1.f" || { : >"$A/$1.e"; echo "E $1 126" >&4; return; }
  exec 5<>"$A/$1.f"
  launch "$@" >"$A/$1.f"
  exec 6<"$A/$1.f" 5<&-
  n=0
  while IFS= read -r l <&6 || [ -n "$l" ]; do
    n=$((n + 1)); printf '%s\n' "$l" >"$A/$1.l$n"; echo "L $1 $n" >&4; l=
  done
  wait "$p"; rc=$?
  kill -TERM -"$p" 2>/dev/null
  rm -f "$A/$1.p" "$A/$1.c" "$A/$1.f"
  echo "E $1 $rc" >&4
}
payload() {  # LEN bytes of stdin into a file; head -c reads no further than LEN
  head -c "$1" >"$2"
}
killjob() {
  [ -f "$A/$1.p" ] && read -r p <"$A/$1.p" || return 0
  : >"$A/$1.t"
  kill -TERM -"$p" 2>/dev/null
  # KILL a second later, from a group of its own that the final sweep (*.p) also ends.
  setsid /bin/sh -c 'sleep 1; kill -KILL -"$1"; rm -f "$2"' sh "$p" "$A/$1k.p" </dev/null >/dev/null 2>&1 4>&- &
  echo "$!" >"$A/$1k.p"
}
sweep() {  # every command group still alive: TERM, then KILL after a second; a second pass catches a
           # job that had not yet written its pid when the first looked
  sig=TERM; i=0
  while :; do
    alive=
    for f in "$A"/*.p; do
      [ -f "$f" ] && read -r p <"$f" && kill -"$sig" -"$p" 2>/dev/null && alive=1
    done
    i=$((i + 1))
    [ -z "$alive" ] && [ "$i" -ge 2 ] && break
    [ "$i" -ge 20 ] && sig=KILL
    [ "$i" -ge 60 ] && break
    sleep 0.05 2>/dev/null || sleep 1
  done
}
watchdog() {  # no line from the tool for LOST seconds: it is gone; end everything, then the loop
  trap - PIPE
  n=0; : >"$A/w"
  while sleep 1; do   # one second at a time: killed with the loop, it leaves no long sleep behind
    n=$((n + 1))
    [ "$n" -lt "$LOST" ] && continue
    if [ "$A/alive" -nt "$A/w" ]; then n=0; : >"$A/w"; continue; fi
    echo "clustercheck: no word from the tool for ${LOST} s: every command of this session stopped" >&2
    kill -TERM "$loop" "$em" 2>/dev/null
    sweep
    rm -rf "$D"
    exit 0
  done
}
emitter <"$A/q" & em=$!
exec 4>"$A/q"
: >"$A/alive"
loop=$$
watchdog </dev/null >/dev/null 4>&- & wd=$!
echo H >&4
while read -r k id how rest; do
  : >"$A/alive"
  case $k in
    R|S)
      c=
      if [ "$how" = F ]; then payload "$rest" "$A/$id.c"; else eval "c=$rest"; fi
      if [ "$k" = R ]; then run_job "$id" "$how" "$c" & else start_job "$id" "$how" "$c" & fi ;;
    K) killjob "$id" ;;
    P)
      mode=${rest%% *}; eval "name=${rest#* }"
      payload "$how" "$D/$name"; rc=$?
      chmod "$mode" "$D/$name" 2>/dev/null
      echo "P $id $rc $(wc -c <"$D/$name" 2>/dev/null | tr -d ' ')" >&4 ;;
    Q) break ;;
  esac
done
kill "$wd" 2>/dev/null
sweep
echo Q >&4; exec 4>&-
wait "$em"
rm -rf "$D"
printf '@Z\n'
'''
