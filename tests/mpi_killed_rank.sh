#!/usr/bin/env bash
# A rank that dies ends the whole job quickly, with a non-zero exit and a message that names
# the lost rank.  usage: mpi_killed_rank.sh FGPIPE CONFIG
set -u
fgpipe=$1 config=$2
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
mpirun_pid=
cleanup() { [ -n "$mpirun_pid" ] && kill -9 "$mpirun_pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
passed=0 failed=0
check() { if eval "$2"; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1"; failed=$((failed + 1)); fi; }

setsid mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
  --config "$config" --set model=784-64-32-16-10 --set stages=4 --set steps=1000000 \
  --set print_every=1000000 --out "$dir/out" >"$dir/log" 2>&1 &
mpirun_pid=$!

# Wait until it trains (loss.csv grows), then kill the rank of stage 2.
for _ in $(seq 300); do
  [ -f "$dir/out/loss.csv" ] && [ "$(wc -l <"$dir/out/loss.csv")" -gt 5 ] && break
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.1
done
victim=
for pid in $(pgrep -f "$fgpipe train"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=2; then victim=$pid; fi
done
check "found the rank-2 process while training" '[ -n "$victim" ]'
[ -n "$victim" ] || sed 's/^/# /' "$dir/log"
start=$(date +%s%N)
[ -n "$victim" ] && kill -9 "$victim"
for _ in $(seq 150); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
wait "$mpirun_pid"; rc=$?
mpirun_pid=
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "# job ended ${ms} ms after the kill, exit code $rc"
check "job ended within 15 s" '[ "$ms" -lt 15000 ]'
check "non-zero exit" '[ "$rc" -ne 0 ]'
check "message names the lost rank" 'grep -qE "rank 2.*(signal 9|Killed)|process rank 2" "$dir/log"'
grep -m2 -E "rank 2|signal" "$dir/log" | sed 's/^/# /'

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
