#!/usr/bin/env bash
# Checkpoints: a run stopped by SIGUSR1 on 4 stages and resumed on 4, 2 or 1 stages ends with
# byte-identical weights and losses to the uninterrupted run (bp, and fg+bp whose cv_scale = auto
# keeps running sums in the checkpoint besides the reference); a job killed with
# SIGKILL while writing checkpoints leaves one that loads; bad checkpoint files are refused with
# exit code 2 and a message naming the problem.  usage: checkpoint_restart.sh FGPIPE CONFIG
# FGPIPE_TIER=quick: bp stopped on 4 stages and resumed on 2; rest: everything else.
. "$(dirname "$0")/lib.sh" "$@"
small_mnist 4096 1000  # the runs are compared with each other: a slice of the data does
base=(--set model=784-64-32-16-10 --set warmup_steps=0 --set steps=300 --set print_every=1000000
      --set data_dir="$dir/mnist")

train() {  # train M OUT SETS... [-- EXTRA ARGS]: a run on M stages writing OUT/ and OUT.bin
  local M=$1 out=$2; shift 2
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" --out "$out" \
    --save-params "$out.bin" "${extra[@]}"
}

# Starts a run on 4 stages, sends SIGUSR1 once it has done 60 steps, waits for it.
train_and_stop() {
  local out=$1; shift
  train 4 "$out" "$@" >"$out.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    [ -f "$out/loss.csv" ] && [ "$(wc -l <"$out/loss.csv")" -gt 60 ] && break
    sleep 0.05
  done
  pkill -USR1 -f "mpirun .*--out $out( |$)"  # mpirun forwards SIGUSR1 to every rank
  wait "$pid"
}

for mode in "bp|mode=bp schedule=1f1b" "fgbp|mode=fg+bp estimator=cv cv_scale=auto lag=0 select=2 optimizer=sgd lr=0.0001" \
            "fg-local|mode=fg perturb=activity local_groups=4 tangents=2 optimizer=sgd lr=0.0001"; do
  name=${mode%%|*}; read -r -a sets <<<"${mode#*|}"
  [ "$name" = bp ] || in_tier rest || continue
  resume_on="4 2 1"  # quick: bp on 2 only; rest: what quick leaves out
  if [ "$tier" = quick ]; then resume_on=2; elif [ "$tier" = rest ] && [ "$name" = bp ]; then resume_on="4 1"; fi
  train 4 "$dir/$name-straight" "${sets[@]}" >"$dir/$name-straight.log" 2>&1
  train_and_stop "$dir/$name-stopped" "${sets[@]}"; rc=$?
  step=$(grep -o "stopped by a signal after step [0-9]*" "$dir/$name-stopped.log" | grep -o "[0-9]*$")
  verdict "$name: SIGUSR1 stops the run with exit 0 and a checkpoint (step ${step:-?})" \
    "$([ "$rc" -eq 0 ] && [ -n "$step" ] && [ -f "$dir/$name-stopped/checkpoint.h5" ] || echo "exit $rc, log: $(tail -n 2 "$dir/$name-stopped.log")")"
  for M in $resume_on; do
    train "$M" "$dir/$name-resumed$M" "${sets[@]}" -- --resume "$dir/$name-stopped" >"$dir/$name-resumed$M.log" 2>&1
    why=
    cmp -s "$dir/$name-straight.bin" "$dir/$name-resumed$M.bin" || why="weights differ"
    # The optimizer state too, as written in the final checkpoints (h5diff compares values).
    h5diff -q "$dir/$name-straight/checkpoint.h5" "$dir/$name-resumed$M/checkpoint.h5" /optimizer /optimizer \
      || why="$why optimizer state differs"
    cmp -s <(cut -d, -f1-3 "$dir/$name-straight/loss.csv" | tail -n +$((step + 2))) \
           <(cut -d, -f1-3 "$dir/$name-resumed$M/loss.csv" | tail -n +2) || why="$why losses differ"
    verdict "$name: stopped on 4 stages, resumed on $M = uninterrupted (weights, optimizer state, losses bitwise)" "$why"
  done
  in_tier rest || continue
  # Resumed into its own directory, as a requeued Slurm job is: loss.csv keeps the rows before
  # the checkpoint and continues, so the whole file is the uninterrupted run's.
  train 2 "$dir/$name-stopped" "${sets[@]}" -- --resume "$dir/$name-stopped" >"$dir/$name-requeued.log" 2>&1
  verdict "$name: resumed into its own --out, loss.csv continues (whole file = uninterrupted)" \
    "$(cmp -s <(cut -d, -f1-3 "$dir/$name-straight/loss.csv") <(cut -d, -f1-3 "$dir/$name-stopped/loss.csv") ||
       echo "loss.csv differs: $(wc -l <"$dir/$name-stopped/loss.csv") lines, uninterrupted $(wc -l <"$dir/$name-straight/loss.csv")")"
done

# SIGKILL at arbitrary moments of a run that checkpoints every step: what is left loads.
good=$dir/crash/checkpoint.h5
in_tier rest && for delay in 0.7 0.9 1.1 1.3; do
  train 2 "$dir/crash" mode=bp -- --checkpoint-every 1 >"$dir/crash.log" 2>&1 &
  # this run's processes alone (its --out): another test may be training beside it
  pid=$!; sleep "$delay"; pkill -KILL -f "$fgpipe train .*--out $dir/crash( |$)"; wait "$pid" 2>/dev/null
  [ -f "$good" ] || continue
  train 2 "$dir/after-crash" mode=bp -- --resume "$good" >"$dir/after-crash.log" 2>&1; rc=$?
  verdict "SIGKILL after ${delay}s: the checkpoint left behind resumes" \
    "$([ "$rc" -eq 0 ] || echo "exit $rc: $(grep -m1 error "$dir/after-crash.log")")"
done

# Bad files: exit 2 and a message that names the problem.
in_tier rest || finish
refuse() {  # refuse LABEL NEEDLE FILE SETS...
  local label=$1 needle=$2 file=$3; shift 3
  train 2 "$dir/bad" "$@" -- --resume "$file" >"$dir/bad.log" 2>&1; local rc=$?
  verdict "$label" "$([ "$rc" -eq 2 ] && grep -qF -- "$needle" "$dir/bad.log" || echo "exit $rc, log: $(grep -m1 error "$dir/bad.log")")"
}
ckpt=$dir/bp-stopped/checkpoint.h5
head -c 20000 "$ckpt" >"$dir/truncated.h5"
echo "not a checkpoint" >"$dir/text.h5"
refuse "truncated file refused" "truncated" "$dir/truncated.h5" mode=bp schedule=1f1b
refuse "non-HDF5 file refused" "not an HDF5 file" "$dir/text.h5" mode=bp schedule=1f1b
refuse "missing file refused" "No such file" "$dir/nothing.h5" mode=bp schedule=1f1b
refuse "another model refused" "it has model = 784-64-32-16-10, the config model = 784-64-33-16-10" "$ckpt" mode=bp schedule=1f1b model=784-64-33-16-10
refuse "another depth refused" "the config model = 784-64-32-16-10-10" "$ckpt" mode=bp schedule=1f1b model=784-64-32-16-10-10
refuse "other seed refused" "seed" "$ckpt" mode=bp schedule=1f1b seed=2

finish
