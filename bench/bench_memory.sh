#!/usr/bin/env bash
# The memory the method saves (issue 43): activation memory per mode, measured and planned, and
# the race at a fixed activation budget per stage. Prints markdown tables:
#
#   table  the main job's model (launch/configs/fashion-mnist-mlp.conf, 784-1024x3-10, 4 x 32) on
#          4 stages, every mode: each stage's measured activation peak (summary.json's
#          activation_peak_bytes), the planned one (fgpipe plan --costs of the run), the planned
#          and the measured (median) step, and the test accuracy after EPOCHS epochs (default 1);
#          a bar plot of the measured peaks, OUT/memory_by_mode.png
#   gpt    the same for the byte GPT (launch/configs/gpt-kjv.conf) on 4 stages: val loss after
#          STEPS steps (default 2000)
#   race   budgets of an eighth and a quarter of bp-1f1b's largest stage (planned, at the main
#          job's micro-batch); per mode the largest micro-batch (and recompute = none | stage)
#          whose planned activations fit (fgpipe plan, a binary search over micro-batches 1..32),
#          then a run of RACE_EPOCHS epochs (default 1) checks the measured peak against the
#          budget and gives the seconds and samples to test accuracy 0.85 and 0.88
#          (bench/time_to_accuracy.py); curves and a plot per budget (tools/fgpipe-report
#          --curves) go to OUT (default bench/out/memory)
#
# Modes: bp-1f1b, bp-zb, bp-zb-rc (recompute = stage), fg-weight, fg-activity, fg-local
# (activity with local_groups = 32 and K = 16: fashion-mnist-mlp-fg.conf's settings), fg-local-k1
# (the same at K = 1), fg+bp (its defaults: activity, mix, shrink 0, select auto), fg+bp-rc, and
# fg+bp-1-rc (select = 1: one micro-batch backpropagated per stage and step, recomputed; in the
# race fg+bp-1, recompute chosen as for the others).
# MODES="NAME ..." runs only those; BUDGETS=quarter (or eighth) races at that budget alone.
# With fewer cores than 4 ranks the runs are oversubscribed: measured seconds are the shared
# machine's; the projection (steps x the planned step of the start-up's op costs) is given too.
#
# usage: bench/bench_memory.sh [table] [gpt] [race]          (default: all three)
#        QUICK=1 bench/bench_memory.sh ...   a quick check: 20 steps per run, 10 for the GPT
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
fgpipe=build/fgpipe
[ -x "$fgpipe" ] || { echo "bench_memory: build first (launch/build.sh)" >&2; exit 2; }
out_dir=${OUT:-bench/out/memory}
mkdir -p "$out_dir"
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(table gpt race)
mlp_config=launch/configs/fashion-mnist-mlp.conf
stages=4
if [ "${QUICK:-0}" = 1 ]; then
  mlp_budget=(--set steps=20) race_budget=(--set steps=20) gpt_steps=10
else
  mlp_budget=(--set epochs="${EPOCHS:-1}" --set steps=0)
  race_budget=(--set epochs="${RACE_EPOCHS:-1}" --set steps=0) gpt_steps=${STEPS:-2000}
fi
modes=(
  "bp-1f1b|mode=bp schedule=1f1b|bp-1f1b"
  "bp-zb|mode=bp schedule=zb|bp-zb"
  "bp-zb-rc|mode=bp schedule=zb recompute=stage|bp-zb"
  "fg-weight|mode=fg perturb=weight|fg"
  "fg-activity|mode=fg perturb=activity|fg"
  "fg-local|mode=fg perturb=activity local_groups=32 tangents=16|fg"
  "fg-local-k1|mode=fg perturb=activity local_groups=32 tangents=1|fg"
  "fg+bp|mode=fg+bp|fg+bp"
  "fg+bp-rc|mode=fg+bp recompute=stage|fg+bp"
  "fg+bp-1-rc|mode=fg+bp select=1 recompute=stage|fg+bp"
)
read -ra want <<<"${MODES:-}"
mpi_flags "$stages"
rows() { /usr/bin/python3 bench/memory_rows.py "$@"; }
sets_of() { local kv; SETS=(); for kv in $1; do SETS+=(--set "$kv"); done; }

# train OUT CONFIG [ARGS...]: one run on 4 stages, then plan it from its summary (its cuts and
# the op costs its start-up timed). False, with the error in OUT.problem, if either fails.
train() {
  local out=$1 config=$2; shift 2
  rm -rf "$out"
  if mpirun "${MPI_FLAGS[@]}" "$fgpipe" train --config "$config" --set stages="$stages" "$@" \
       --set print_every=1000000 --out "$out" --no-checkpoint --summary-json "$out.json" \
       >"$out.txt" 2>&1 &&
     "$fgpipe" plan --config "$config" --set stages="$stages" "$@" --costs "$out.json" \
       --json "$out.plan.json" >"$out.plan.txt" 2>&1; then
    return 0
  fi
  cat "$out.txt" "$out.plan.txt" 2>/dev/null | grep -m1 "error:" >"$out.problem" ||
    tail -n 1 "$out.txt" >"$out.problem"
  return 1
}

# table MODEL CONFIG METRIC EXTRA...: the table's rows for one model.
table() {
  local model=$1 config=$2 metric=$3; shift 3
  echo "| $model, 4 stages | measured activations MiB by stage | planned | planned step ms | measured step ms | $metric |"
  echo "| --- | --- | --- | ---: | ---: | ---: |"
  local m name sets schedule extra
  for m in "${modes[@]}"; do
    IFS='|' read -r name sets schedule <<<"$m"
    selected "$name" "${want[@]}" || continue
    extra=(); [ "$model" = gpt ] && [[ $sets == *mode=fg\ * ]] && extra=(--set lr=0.0003)
    sets_of "$sets"
    if train "$out_dir/$model-${name/+/p}" "$config" "${SETS[@]}" "${extra[@]}" "$@"; then
      rows table "$name" "$out_dir/$model-${name/+/p}" "$schedule" "$metric"
    else
      echo "| $name | failed: $(cat "$out_dir/$model-${name/+/p}.problem") |"
    fi
  done
  [ "$model" = mlp ] || return 0
  local runs=()
  for m in "${modes[@]}"; do
    IFS='|' read -r name sets schedule <<<"$m"
    [ -f "$out_dir/mlp-${name/+/p}.json" ] && runs+=("$out_dir/mlp-${name/+/p}")
  done
  rows plot "$out_dir/memory_by_mode.png" "$(rows planned "$out_dir/mlp-bp-1f1b.plan.json" bp-1f1b)" \
    "${runs[@]}" && echo "plot: $out_dir/memory_by_mode.png"
}

# fit SETS SCHEDULE BUDGET: the largest micro-batch of 1..32 whose planned activations (largest
# stage) fit BUDGET bytes, or 0 (a binary search: they grow with it).
fit() {
  local c lo=-1 hi=32 mid
  mapfile -t c < <(seq 1 32)
  sets_of "$1"
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(( (lo + hi) / 2 ))
    if "$fgpipe" plan --config "$mlp_config" --set stages="$stages" "${SETS[@]}" \
         --set micro_batch="${c[mid]}" --json "$out_dir/fit.json" >/dev/null 2>&1 &&
       [ "$(rows planned "$out_dir/fit.json" "$2")" -le "$3" ]; then lo=$mid; else hi=$mid; fi
  done
  [ "$lo" -ge 0 ] && echo "${c[lo]}" || echo 0
}

race() {
  local need budget label m name sets schedule rc b best best_rc out
  "$fgpipe" plan --config "$mlp_config" --set stages="$stages" --set mode=bp --json "$out_dir/need.json" >/dev/null
  need=$(rows planned "$out_dir/need.json" bp-1f1b)
  for label in ${BUDGETS:-eighth quarter}; do
    budget=$(( need / $([ $label = eighth ] && echo 8 || echo 4) ))
    echo
    echo "Budget: $([ $label = eighth ] && echo an || echo a) $label of bp-1f1b's largest stage at micro-batch 32 ($need B): $budget B" \
         "($(awk -v b="$budget" 'BEGIN { printf "%.2f", b / 2^20 }') MiB) per stage"
    echo "| mode | micro-batch | recompute | planned MiB | measured MiB | fits | 0.85 s | proj. | 0.88 s | proj. | samples | best | step ms | planned | start-up | RSS | act. |"
    echo "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    for m in "${modes[@]}"; do
      IFS='|' read -r name sets schedule <<<"$m"
      selected "$name" "${want[@]}" || continue
      # recompute is a choice of the race, not a mode (a later --set recompute wins)
      [ "$name" = bp-zb-rc ] || [ "$name" = fg+bp-rc ] && continue
      name=${name%-rc}
      best=0 best_rc=none
      for rc in none stage; do
        [ "$rc" = stage ] && [[ $sets == *mode=fg\ * ]] && continue
        b=$(fit "$sets recompute=$rc" "$schedule" "$budget")
        [ "$b" -gt "$best" ] && best=$b best_rc=$rc
      done
      if [ "$best" = 0 ]; then
        sets_of "$sets"
        [[ $sets == *mode=fg\ * ]] || SETS+=(--set recompute=stage)
        "$fgpipe" plan --config "$mlp_config" --set stages="$stages" "${SETS[@]}" --set micro_batch=1 \
          --json "$out_dir/fit.json" >/dev/null 2>&1
        echo "| $name | none fits | | $(awk -v b="$(rows planned "$out_dir/fit.json" "$schedule")" \
          'BEGIN { printf "%.2f", b / 2^20 }') at micro-batch 1 | | no |"
        continue
      fi
      sets_of "$sets recompute=$best_rc micro_batch=$best"
      out=$out_dir/race-$label-${name/+/p}
      # about 8 evaluations per epoch
      if ! train "$out" "$mlp_config" "${SETS[@]}" "${race_budget[@]}" \
           --set eval_every=$(( 60000 / (8 * 4 * best) )); then
        echo "| $name | $best | $best_rc | failed: $(cat "$out.problem") |"
        continue
      fi
      local planned_b measured_b tta
      planned_b=$(rows planned "$out.plan.json" "$schedule") measured_b=$(rows peak "$out")
      tta=$(/usr/bin/python3 bench/time_to_accuracy.py "$name" "$out" "0.85 0.88" "$out.plan.json" \
        "$out.plan.json" "$schedule" 1 accuracy)
      echo "| $name | $best | $best_rc | $(awk -v p="$planned_b" -v m="$measured_b" -v b="$budget" \
        'BEGIN { printf "%.2f | %.2f | %s", p / 2^20, m / 2^20, m <= b ? "yes" : "no" }') |${tta#*|*|}"
    done
    /usr/bin/python3 tools/fgpipe-report --curves "$out_dir"/race-$label-*.projected.csv \
      --out "$out_dir/race-$label" >/dev/null 2>&1 &&
      echo "plot: $out_dir/race-$label/time_to_accuracy.png"
  done
  echo "0.85 s, 0.88 s: training seconds to the target (loss.csv's step times; oversubscribed when"
  echo "the machine has fewer cores than ranks); proj.: steps to it x the step planned from the op"
  echo "costs the start-up timed; samples: to 0.85; best: the best test accuracy; '-': not reached."
}

for part in "${parts[@]}"; do
  case $part in
    table) table mlp "$mlp_config" accuracy "${mlp_budget[@]}" --set eval_every=0 ;;
    gpt) table gpt launch/configs/gpt-kjv.conf val_loss --set text_file="$(launch/text-corpus.sh)" \
           --set steps="$gpt_steps" --set eval_every=0 ;;
    race) race ;;
    *) echo "bench_memory: part $part, expected table, gpt or race" >&2; exit 2 ;;
  esac
done
