#!/usr/bin/env bash
# Data-parallel replicas: R = 2 pipelines of M = 2 stages with N = 2 micro-batches each train
# the same global batch as R = 1 with N = 4 (replica r's micro-batch b is global micro-batch
# r*N + b: same samples, same tangents), so after 20 steps the weights and losses agree:
#   fg     bitwise (only scalars cross replicas, each in its own slot: no rounding); with
#          perturb = activity within the tolerance (each replica forms the estimate of its own
#          micro-batches from their layer inputs, and the estimates are summed),
#   bp     within the tolerance of summation order (the gradient is summed over replicas),
#   fg+bp  (cv, lag 1 and lag 0, every micro-batch backpropagated) the same for the exact
#          gradient c, summed over replicas with a non-blocking allreduce.
# A control shows the tolerance is tight enough to see a wrong shard: R = 1 with replica 0's
# N = 2 micro-batches alone is far from R = 2.  Checkpoints: written with R = 2 and resumed
# with R = 1 (and the reverse), equal to the uninterrupted run.  Bad layouts exit with 2.
#
# usage: replicas.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
# Largest |difference| allowed: weights are O(1); summation-order differences measured 1e-7.
tol_params=1e-6 tol_loss=1e-5
small_mnist 4096 1000  # the runs are compared with each other: a slice of the data does
base=(--set model=784-64-32-16-10 --set warmup_steps=0 --set print_every=1000000 --set stages=2
      --set data_dir="$dir/mnist")
sgd=(optimizer=sgd lr=0.0001)

# run NAME RANKS KEY=VALUE... [-- ARGS]: a run into $dir/NAME/ and $dir/NAME.bin.
run() {
  local name=$1 np=$2; shift 2
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  timeout 120 mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" "${sets[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" "${extra[@]}" >"$dir/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || echo "$name exited with $rc: $(grep -m1 error "$dir/$name.log")" >"$dir/$name.problem"
}


# max_diff A B: largest |a - b| over the weights, then over the losses of steps FROM.. (both runs'
# loss.csv from step FROM on; default 0), as "params losses"; empty when a run is missing.
max_diff() {
  local a=$1 b=$2 from=${3:-0}
  [ -f "$dir/$a.bin" ] && [ -f "$dir/$b.bin" ] || return
  local p l
  p=$(paste <(od -An -v -f -w4 "$dir/$a.bin") <(od -An -v -f -w4 "$dir/$b.bin") |
      awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
           END { if (bad || NR == 0) print "sizes-differ"; else printf "%g", m }')
  l=$(paste -d, <(awk -F, -v f="$from" 'NR > 1 && $1 >= f { print $2 }' "$dir/$a/loss.csv") \
                <(awk -F, -v f="$from" 'NR > 1 && $1 >= f { print $2 }' "$dir/$b/loss.csv") |
      awk -F, 'NF != 2 || $1 == "" || $2 == "" { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
               END { if (bad || NR == 0) print "steps-differ"; else printf "%g", m }')
  echo "$p $l"
}

# close LABEL A B [FROM] [bitwise]: weights and losses of A and B agree within the tolerances
# (bitwise: the weights byte for byte).
close() {
  local label=$1 a=$2 b=$3 from=${4:-0} exact=${5:-} why=
  for r in "$a" "$b"; do [ -f "$dir/$r.problem" ] && why="$why $(cat "$dir/$r.problem")"; done
  if [ -z "$why" ]; then
    read -r dp dl <<<"$(max_diff "$a" "$b" "$from")"
    label="$label (max |dw| ${dp:-?}, max |dloss| ${dl:-?})"
    if [ -n "$exact" ]; then
      cmp -s "$dir/$a.bin" "$dir/$b.bin" || why="weights differ in $(cmp -l "$dir/$a.bin" "$dir/$b.bin" | wc -l) bytes"
    else
      awk -v d="$dp" -v t="$tol_params" 'BEGIN { exit !(d != "" && d + 0 == d && d <= t) }' || why="weights differ by $dp > $tol_params"
    fi
    awk -v d="$dl" -v t="$tol_loss" 'BEGIN { exit !(d != "" && d + 0 == d && d <= t) }' || why="$why losses differ by $dl > $tol_loss"
  fi
  verdict "$label" "$why"
}

cases=(
  "bp|mode=bp schedule=1f1b|"
  "fg|mode=fg tangents=2 ${sgd[*]}|bitwise"
  "fg-activity|mode=fg perturb=activity tangents=2 ${sgd[*]}|"
  "fg-local|mode=fg perturb=activity local_groups=4 tangents=2 ${sgd[*]}|"
  "fgbp|mode=fg+bp estimator=cv lag=1 ${sgd[*]}|"
  "fgbp-lag0|mode=fg+bp estimator=cv lag=0 ${sgd[*]}|"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name sets exact <<<"$c"
  read -r -a sets <<<"$sets"
  sel4=() sel2=()
  [[ "$name" = fgbp* ]] && sel4=(select=4) sel2=(select=2)
  run "$name-R1" 2 steps=20 micro_batches=4 "${sets[@]}" "${sel4[@]}"
  run "$name-R2" 4 steps=20 micro_batches=2 replicas=2 "${sets[@]}" "${sel2[@]}"
  close "$name: 2 replicas x 2 micro-batches = 1 replica x 4 micro-batches${exact:+, weights bitwise}" \
    "$name-R1" "$name-R2" 0 "$exact"
done
grep -q "2 data-parallel replicas of 2 stages" "$dir/bp-R2.log"
verdict "the R = 2 run reports its layout" "$( [ $? -eq 0 ] || echo "no layout line in $dir/bp-R2.log")"
# The tolerance sees data: replica 0's shard alone is not the global batch.
run bp-half 2 steps=20 micro_batches=2 mode=bp schedule=1f1b
read -r dp _ <<<"$(max_diff bp-half bp-R2)"
verdict "control: R = 1 with replica 0's shard only differs from R = 2 (max |dw| ${dp:-?})" \
  "$(awk -v d="${dp:-}" -v t="$tol_params" 'BEGIN { exit !(d + 0 == d && d > 100 * t) }' || echo "difference ${dp:-?} is not far above $tol_params")"

# Checkpoints across layouts: constant lr, so a 10-step run's final checkpoint resumed to step
# 20 is the uninterrupted 20-step run.
ckpt=(mode=bp lr_schedule=constant)
run ck-R2-straight 4 steps=20 micro_batches=2 replicas=2 "${ckpt[@]}"
run ck-R2-first 4 steps=10 micro_batches=2 replicas=2 "${ckpt[@]}"
run ck-R1-resumed 2 steps=20 micro_batches=4 "${ckpt[@]}" -- --resume "$dir/ck-R2-first"
close "checkpoint written with R = 2 resumes with R = 1" ck-R2-straight ck-R1-resumed 10
run ck-R1-first 2 steps=10 micro_batches=4 "${ckpt[@]}"
run ck-R2-resumed 4 steps=20 micro_batches=2 replicas=2 "${ckpt[@]}" -- --resume "$dir/ck-R1-first"
close "checkpoint written with R = 1 resumes with R = 2" ck-R2-straight ck-R2-resumed 10

# Bad layouts: exit 2 and a message naming the problem.
refuse() {  # refuse LABEL NEEDLE RANKS KEY=VALUE...
  local label=$1 needle=$2; shift 2
  run bad "$@" steps=2
  local rc=0
  [ -f "$dir/bad.problem" ] && rc=$(grep -o "exited with [0-9]*" "$dir/bad.problem" | grep -o "[0-9]*$")
  verdict "$label" "$([ "$rc" = 2 ] && grep -qF -- "$needle" "$dir/bad.log" || echo "exit $rc, log: $(grep -m1 error "$dir/bad.log")")"
  rm -f "$dir/bad.problem"
}
refuse "3 ranks for 2 stages x 1 replica refused" "3 MPI ranks, but stages x replicas = 2 x 1 needs 2" 3
refuse "4 ranks for 2 stages x 3 replicas refused" "4 MPI ranks, but stages x replicas = 2 x 3 needs 6" 4 replicas=3

finish
