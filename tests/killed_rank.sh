#!/usr/bin/env bash
# A rank that dies mid-training ends the whole job: a 4-rank run that checkpoints every 10 steps
# is killed in one rank (world rank 2, SIGKILL) once it has written a checkpoint, and mpirun
# must exit within 15 s of the kill, with a non-zero status, naming the lost rank; nothing of
# the job may be left running. The last checkpoint must then resume: 10 more steps from it give
# bitwise the weights of an uninterrupted run (constant lr, so the step count does not matter).
#
# usage: killed_rank.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
victim_rank=2 deadline_s=15 startup_s=30
# A tag in every rank's environment: finds this job's ranks and no one else's.
tag="fgpipe-killed-rank-$$-$RANDOM"
mpirun_pid=

# The ranks of this job: processes whose environment carries the tag.
job_pids() {
  local pid
  for pid in $(pgrep -f -- "$fgpipe"); do
    { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qxF "FGPIPE_TEST_TAG=$tag" && echo "$pid"
  done
}

# Open MPI puts every rank in a process group of its own, so killing mpirun's group is not
# enough: the job's session (id = mpirun's pid, from setsid) and the tagged ranks are ended too.
end_job() {
  [ -n "$mpirun_pid" ] || return 0
  if kill -0 "$mpirun_pid" 2>/dev/null; then
    kill -TERM "$mpirun_pid" 2>/dev/null  # mpirun takes its ranks down with it
    for _ in $(seq 20); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  pkill -KILL -s "$mpirun_pid" 2>/dev/null
  kill -KILL -- "-$mpirun_pid" 2>/dev/null
  wait "$mpirun_pid" 2>/dev/null
  mpirun_pid=
}
cleanup() {
  end_job
  local pid
  for pid in $(job_pids); do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT

check() {  # check LABEL CONDITION...
  local label=$1; shift
  if "$@"; then echo "PASS $label"; passed=$((passed + 1)); else echo "FAIL $label"; failed=$((failed + 1)); fi
}

small_mnist 4096 1000  # a slice of the data: quicker to start
small=(--set model=784-64-32-16-10 --set warmup_steps=0 --set lr_schedule=constant --set print_every=1000000
       --set data_dir="$dir/mnist")
# Its own session (and process group, id = its pid), so the cleanup can end all of it.
setsid -w mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x FGPIPE_TEST_TAG="$tag" \
  "$fgpipe" train --config "$config" "${small[@]}" --set stages=4 --set steps=100000 \
  --out "$dir/out" --checkpoint-every 10 >"$dir/log" 2>&1 </dev/null &
mpirun_pid=$!

# Training, with a checkpoint written (renamed into place once complete) and a few steps beyond.
training=false
for _ in $(seq $((startup_s * 10))); do
  if [ -f "$dir/out/checkpoint.h5" ] && [ "$(wc -l <"$dir/out/loss.csv")" -gt 15 ]; then training=true; break; fi
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.1
done
check "4-rank job is training and has checkpointed within ${startup_s} s" $training
victim=
for pid in $(job_pids); do
  { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim_rank" && victim=$pid
done
check "found the process of rank $victim_rank (pid ${victim:-none})" [ -n "$victim" ]
if ! $training || [ -z "$victim" ]; then
  sed 's/^/#   /' "$dir/log" | tail -n 20
  finish
fi

t0=$(date +%s.%N)
kill -KILL "$victim"
ended=false
for _ in $(seq $(((deadline_s + 5) * 10))); do
  kill -0 "$mpirun_pid" 2>/dev/null || { ended=true; break; }
  sleep 0.1
done
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
if $ended; then
  wait "$mpirun_pid"; rc=$?
  mpirun_pid=
  echo "# mpirun exited ${secs} s after the kill, exit status $rc"
else
  rc=0
  echo "# mpirun still running ${secs} s after the kill"
fi
check "mpirun exits within ${deadline_s} s of the kill (${secs} s)" \
  awk -v s="$secs" -v d="$deadline_s" -v e="$ended" 'BEGIN { exit !(e == "true" && s < d) }'
check "mpirun exit status is non-zero ($rc)" [ "$rc" -ne 0 ]
check "output names the lost rank $victim_rank" \
  grep -qE "process rank $victim_rank with PID [0-9]+ .*(exited on signal 9|Killed)" "$dir/log"
grep -m1 -E "process rank $victim_rank" "$dir/log" | sed 's/^/#   /'
$ended || end_job
# The other ranks go with mpirun; give them a moment to be reaped.
for _ in $(seq 20); do [ -z "$(job_pids)" ] && break; sleep 0.1; done
left=$(job_pids | tr '\n' ' ')
check "no rank left running${left:+ (pids $left)}" [ -z "$left" ]

# The last checkpoint resumes: step N (written before the kill) + 10 steps = a straight run.
at=$(h5dump -a /step "$dir/out/checkpoint.h5" 2>/dev/null | sed -n 's/^ *(0): *\([0-9]*\).*/\1/p')
check "the last checkpoint is whole and names its step (${at:-none})" [ -n "$at" ]
[ -n "$at" ] || finish
end=$((at + 10))
timeout 120 mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
  --config "$config" "${small[@]}" --set stages=4 --set steps=$end --resume "$dir/out" \
  --save-params "$dir/resumed.bin" >"$dir/resumed.log" 2>&1 </dev/null
rc=$?
check "mpirun --resume from the checkpoint exits 0 ($rc)" [ "$rc" -eq 0 ]
check "the resumed run starts at step $at" grep -q "fgpipe: resumed from $dir/out/checkpoint.h5 at step $at\$" "$dir/resumed.log"
[ "$rc" -eq 0 ] || sed 's/^/#   /' "$dir/resumed.log" | tail -n 10
timeout 120 mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
  --config "$config" "${small[@]}" --set stages=4 --set steps=$end \
  --save-params "$dir/straight.bin" >"$dir/straight.log" 2>&1 </dev/null
check "killed at step ~$at, resumed to step $end = $end steps uninterrupted, bitwise" \
  cmp -s "$dir/resumed.bin" "$dir/straight.bin"
finish
