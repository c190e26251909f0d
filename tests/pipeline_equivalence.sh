#!/usr/bin/env bash
# Pipeline equivalence: the same 20 training steps on M = 1, 2 and 4 pipeline stages (one MPI
# rank per stage) give byte-identical losses and final parameters, in every mode (that each
# estimator reduces to bp when every micro-batch is exact: exact_estimators.sh).
# FGPIPE_TIER=quick: only fg+bp with cv, lag 1 and K = 2 (the first case) on 2 and 4 stages;
# rest: the others, 4 stages against 1 (4 has a first, middle and last stage); long: the
# others on 2 stages against 1.
#
# usage: pipeline_equivalence.sh FGPIPE CONFIG
#
# loss.csv holds step,loss,lr followed by wall-clock columns (seconds, makespan, bubble,
# bubble_used_by_b) that differ from run to run, so only its first three columns are compared;
# the parameter files (--save-params, raw float32 of the whole model) are compared whole.
. "$(dirname "$0")/lib.sh" "$@"
steps=20
small_mnist 4096 1000  # the runs are compared with each other: a slice of the data does
base=(--set model=784-64-32-16-10 --set steps=$steps --set warmup_steps=0 --set micro_batches=4
      --set print_every=1000000 --set data_dir="$dir/mnist")
sgd=(optimizer=sgd lr=0.0001)

# run NAME M KEY=VALUE...: trains on M stages into $dir/NAME/ (loss.csv) and $dir/NAME.bin.
run() {
  local name=$1 M=$2; shift 2
  local sets=() kv rc
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" --no-checkpoint >"$dir/$name.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || echo "# $name: mpirun -np $M exited with $rc" >>"$dir/$name.problems"
}

# problems_of NAME: why run NAME cannot be compared (failed, or loss.csv incomplete).
problems_of() {
  local name=$1
  [ -f "$dir/$name.problems" ] && { tail -n 1 "$dir/$name.problems" | sed 's/^# //'; sed 's/^/#   /' "$dir/$name.log" | tail -n 5 >&2; return; }
  [ -f "$dir/$name.bin" ] || { echo "$name: no params file"; return; }
  local lines
  lines=$(wc -l <"$dir/$name/loss.csv" 2>/dev/null || echo 0)
  [ "$lines" -eq $((steps + 1)) ] || echo "$name: loss.csv has $lines lines, want $((steps + 1))"
}

# same LABEL A B: runs A and B have identical step,loss,lr columns and identical params.
same() {
  local label=$1 a=$2 b=$3 why=()
  local pa pb
  pa=$(problems_of "$a"); pb=$(problems_of "$b")
  [ -n "$pa" ] && why+=("$pa")
  [ -n "$pb" ] && why+=("$pb")
  if [ ${#why[@]} -eq 0 ]; then
    cmp -s <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") ||
      why+=("losses differ (first: $(diff <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") | grep -m1 '^>' | cut -c3-))")
    cmp -s "$dir/$a.bin" "$dir/$b.bin" ||
      why+=("params differ ($(cmp -l "$dir/$a.bin" "$dir/$b.bin" 2>/dev/null | wc -l) bytes of $(stat -c %s "$dir/$a.bin"))")
  fi
  verdict "$label" "${why[*]}"
}

cases=(
  "fgbp-cv-lag1-sel2-K2|mode=fg+bp estimator=cv lag=1 select=2 tangents=2 ${sgd[*]}"
  "bp-gpipe|mode=bp schedule=gpipe"
  "bp-1f1b|mode=bp schedule=1f1b"
  "bp-zb|mode=bp schedule=zb"
  "fg|mode=fg ${sgd[*]}"
  "fg-K3|mode=fg tangents=3 ${sgd[*]}"
  "fg-activity-K2|mode=fg perturb=activity tangents=2 ${sgd[*]}"
  "fg-local-G4-K2|mode=fg perturb=activity local_groups=4 tangents=2 ${sgd[*]}"
  "fg-lowrank-r4|mode=fg tangent_rank=4 ${sgd[*]}"
  "fgbp-cv-lowrank-r2-lag1|mode=fg+bp estimator=cv lag=1 select=2 tangent_rank=2 ${sgd[*]}"
  "fgbp-mix-activity-sel1|mode=fg+bp estimator=mix shrink=0.5 perturb=activity select=1 ${sgd[*]}"
  "fgbp-mix-local-sel1|mode=fg+bp estimator=mix shrink=0.5 perturb=activity local_groups=4 tangents=2 select=1 ${sgd[*]}"
  "fgbp-cv-lag0-sel2|mode=fg+bp estimator=cv lag=0 select=2 ${sgd[*]}"
  "fgbp-cv-auto-lag1-sel2|mode=fg+bp estimator=cv cv_scale=auto lag=1 select=2 ${sgd[*]}"
  "fgbp-cv-auto-lag0-sel1-K2|mode=fg+bp estimator=cv cv_scale=auto lag=0 select=1 tangents=2 ${sgd[*]}"
  "fgbp-cv-lag2-sel2|mode=fg+bp estimator=cv lag=2 select=2 ${sgd[*]}"
  "fgbp-fg-sel1|mode=fg+bp perturb=weight estimator=fg select=1 ${sgd[*]}"
  "fgbp-cv-lag1-N40-sel16|mode=fg+bp estimator=cv lag=1 select=16 micro_batches=40 ${sgd[*]}"
  "fgbp-guided-lag1-K2|mode=fg+bp estimator=guided lag=1 select=2 tangents=2 ${sgd[*]}"
)
for c in "${cases[@]}"; do
  name=${c%%|*}
  if [ "$c" = "${cases[0]}" ]; then stages=$(in_tier quick && echo 2 4)
  else stages="$(in_tier long && echo 2) $(in_tier rest && echo 4)"; fi
  [ -n "${stages// /}" ] || continue
  read -r -a sets <<<"${c#*|}"
  for M in 1 $stages; do run "$name-M$M" "$M" "${sets[@]}"; done
  for M in $stages; do same "$name: M=$M vs M=1" "$name-M1" "$name-M$M"; done
done

# Zero bubble's split backward adds each micro-batch's weight gradient in 1F1B's order.
stages="$(in_tier rest && echo 1 4) $(in_tier long && echo 2)"
for M in $stages; do same "bp-zb equals bp-1f1b: M=$M" "bp-zb-M$M" "bp-1f1b-M$M"; done
in_tier rest || finish

# The stages are cut by the work timed on each rank (boundaries=auto), or by parameters where
# the timed cut is not clearly better, whatever cut that gives; the work is reported either way.
if grep -qE "stages cut by (measured work|parameters).*, ms per step:" "$dir/fg-M4.log"; then
  verdict "layout: boundaries=auto cuts by timed work or parameters, and says which" ""
else
  verdict "layout: boundaries=auto cuts by timed work or parameters, and says which" "fg-M4 did not report its cut"
fi

finish
