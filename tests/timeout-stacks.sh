#!/usr/bin/env bash
# timeout-stacks.sh SECONDS COMMAND...: coreutils' `timeout SECONDS COMMAND...`, but a command
# still running at the limit first has every thread's stack, and its child processes', printed
# to stderr (with gdb, when installed): a rare hang in CI then leaves where it hung in the
# test's output. Exit status as timeout's: 124 at the limit, else the command's.
set -u
limit=$1; shift
"$@" <&0 &
cmd=$!
sleep "$limit" &
timer=$!
wait -n "$cmd" "$timer"
if ! kill -0 "$cmd" 2>/dev/null; then
  kill "$timer" 2>/dev/null
  wait "$cmd"
  exit $?
fi
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
pids=$(tree "$cmd")
echo "timeout-stacks: still running after ${limit} s: $*" >&2
for p in $pids; do
  echo "--- pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)" >&2
  if command -v gdb >/dev/null; then
    gdb -p "$p" -batch -ex "thread apply all bt 30" 2>/dev/null | grep -E '^(Thread|#)' >&2
  else
    echo "(gdb not installed: no stacks)" >&2
  fi
done
kill -TERM $pids 2>/dev/null
sleep 1
kill -KILL $pids 2>/dev/null
wait "$cmd" 2>/dev/null
exit 124
