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
#   gpt-race the same for the byte GPT (micro-batches of 1..4 sequences): each run sees the
#          sequences of GPT_RACE_STEPS (default 1000) steps at micro-batch 4; targets: bp-1f1b's
#          val loss at step 1000 of the gpt part's run + 10% (GPT_TARGET overrides), and that loss
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
# usage: bench/bench_memory.sh [table] [gpt] [race] [gpt-race]   (default: the first three)
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
  mlp_budget=(--set steps=20) race_budget=(--set steps=20) gpt_steps=10 gpt_eval_every=5
else
  mlp_budget=(--set epochs="${EPOCHS:-1}" --set steps=0)
  race_budget=(--set epochs="${RACE_EPOCHS:-1}" --set steps=0) gpt_steps=${STEPS:-2000}
  gpt_eval_every=250  # the curve gpt-race takes bp's loss at 1000 steps from
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

# The race's model: race_model mlp | gpt sets R_* (config and its sets, metric, targets, the
# largest micro-batch tried, the micro-batch the budgets are fractions of, and the run's length).
race_model() {
  R_MODEL=$1
  if [ "$1" = mlp ]; then
    R_CONFIG=$mlp_config R_SETS=() R_METRIC=accuracy R_TARGETS="0.85 0.88" R_MB_MAX=32 R_PREFIX=race
  else
    # fixed cuts (the 1F1B table's of docs/pipeline.md): auto cuts follow each plan's timing
    R_CONFIG=launch/configs/gpt-kjv.conf R_SETS=(--set text_file="$(launch/text-corpus.sh)" --set boundaries=10,18,26)
    R_METRIC=val_loss R_MB_MAX=4 R_PREFIX=gpt-race R_TARGETS=$(gpt_targets)
  fi
}

# The GPT's targets: bp-1f1b's val loss at step 1000 of the gpt table's run (its eval line
# nearest below it) + 10%, and that loss itself; GPT_TARGET overrides the first.
gpt_targets() {
  local run=$out_dir/gpt-bp-1f1b.txt loss
  loss=$(awk '/eval step/ { s = $3 + 0; if (s <= 1000) l = $6 } END { print l }' "$run" 2>/dev/null)
  [ -n "$loss" ] || { echo "bench_memory: gpt-race needs $run with eval lines (run the gpt part first)" >&2; exit 2; }
  awk -v l="$loss" -v t="${GPT_TARGET:-}" 'BEGIN { printf "%.4f %.4f", t != "" ? t : 1.1 * l, l }'
}

# The run's length at micro-batch B: the MLP one epoch; the GPT the sequences of GPT_RACE_STEPS
# (default 1000) steps at its config's micro-batch, evaluated 8 times.
race_length() {
  local b=$1 steps
  if [ "$R_MODEL" = mlp ]; then
    echo "${race_budget[@]} --set eval_every=$(( 60000 / (8 * 4 * b) ))"
  else
    steps=$(( ${GPT_RACE_STEPS:-1000} * 4 / b ))
    [ "${QUICK:-0}" = 1 ] && steps=20
    echo "--set steps=$steps --set eval_every=$(( steps / 8 > 0 ? steps / 8 : 1 ))"
  fi
}

# fit SETS SCHEDULE BUDGET: the largest micro-batch of 1..R_MB_MAX whose planned activations
# (largest stage) fit BUDGET bytes, or 0 (a binary search: they grow with it).
fit() {
  local lo=0 hi=$((R_MB_MAX + 1)) mid
  sets_of "$1"
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(( (lo + hi) / 2 ))
    if "$fgpipe" plan --config "$R_CONFIG" --set stages="$stages" "${R_SETS[@]}" "${SETS[@]}" \
         --set micro_batch="$mid" --json "$out_dir/fit.json" >/dev/null 2>&1 &&
       [ "$(rows planned "$out_dir/fit.json" "$2")" -le "$3" ]; then lo=$mid; else hi=$mid; fi
  done
  echo "$lo"
}

# race_row NAME SETS SCHEDULE BUDGET LABEL: one mode's row at one budget.
race_row() {
  local name=$1 sets=$2 schedule=$3 budget=$4 label=$5 rc b best=0 best_rc=none out
  for rc in none stage; do
    [ "$rc" = stage ] && [[ $sets == *mode=fg\ * ]] && continue
    b=$(fit "$sets recompute=$rc" "$schedule" "$budget")
    [ "$b" -gt "$best" ] && best=$b best_rc=$rc
  done
  if [ "$best" = 0 ]; then
    sets_of "$sets"
    [[ $sets == *mode=fg\ * ]] || SETS+=(--set recompute=stage)
    "$fgpipe" plan --config "$R_CONFIG" --set stages="$stages" "${R_SETS[@]}" "${SETS[@]}" \
      --set micro_batch=1 --json "$out_dir/fit.json" >/dev/null 2>&1
    echo "| $name | none fits | | $(awk -v b="$(rows planned "$out_dir/fit.json" "$schedule")" \
      'BEGIN { printf "%.2f", b / 2^20 }') at micro-batch 1 | | no |"
    return
  fi
  local extra=(); [ "$R_MODEL" = gpt ] && [[ $sets == *mode=fg\ * ]] && extra=(--set lr=0.0003)
  sets_of "$sets recompute=$best_rc micro_batch=$best"
  out=$out_dir/$R_PREFIX-$label-${name/+/p}
  # shellcheck disable=SC2046  # race_length's words are --set pairs
  if ! train "$out" "$R_CONFIG" "${R_SETS[@]}" "${SETS[@]}" "${extra[@]}" $(race_length "$best"); then
    echo "| $name | $best | $best_rc | failed: $(cat "$out.problem") |"
    return
  fi
  local planned_b measured_b tta
  planned_b=$(rows planned "$out.plan.json" "$schedule") measured_b=$(rows peak "$out")
  tta=$(/usr/bin/python3 bench/time_to_accuracy.py "$name" "$out" "$R_TARGETS" "$out.plan.json" \
    "$out.plan.json" "$schedule" 1 "$R_METRIC")
  echo "| $name | $best | $best_rc | $(awk -v p="$planned_b" -v m="$measured_b" -v b="$budget" \
    'BEGIN { printf "%.2f | %.2f | %s", p / 2^20, m / 2^20, m <= b ? "yes" : "no" }') |${tta#*|*|}"
}

# race mlp | gpt: at an eighth and a quarter of bp-1f1b's largest stage (planned at the config's
# micro-batch), each mode at the largest micro-batch (and recompute) that fits.
race() {
  race_model "$1"
  local need budget label m name sets schedule t1 t2
  "$fgpipe" plan --config "$R_CONFIG" --set stages="$stages" "${R_SETS[@]}" --set mode=bp \
    --json "$out_dir/$R_PREFIX-need.json" >/dev/null
  need=$(rows planned "$out_dir/$R_PREFIX-need.json" bp-1f1b)
  read -r t1 t2 <<<"$R_TARGETS"
  for label in ${BUDGETS:-eighth quarter}; do
    budget=$(( need / $([ $label = eighth ] && echo 8 || echo 4) ))
    echo
    echo "$R_MODEL, budget: $([ $label = eighth ] && echo an || echo a) $label of bp-1f1b's largest stage ($need B): $budget B" \
         "($(awk -v b="$budget" 'BEGIN { printf "%.2f", b / 2^20 }') MiB) per stage; targets $R_METRIC $t1, $t2"
    echo "| mode | micro-batch | recompute | planned MiB | measured MiB | fits | $t1 s | proj. | $t2 s | proj. | samples | best | step ms | planned | start-up | RSS | act. |"
    echo "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    for m in "${modes[@]}"; do
      IFS='|' read -r name sets schedule <<<"$m"
      selected "$name" "${want[@]}" || continue
      # recompute is a choice of the race, not a mode (a later --set recompute wins)
      [ "$name" = bp-zb-rc ] || [ "$name" = fg+bp-rc ] && continue
      [ "$R_MODEL" = gpt ] && [[ $name == fg-local* ]] && continue  # local losses: MLP only
      race_row "${name%-rc}" "$sets" "$schedule" "$budget" "$label"
    done
    /usr/bin/python3 tools/fgpipe-report --curves "$out_dir"/$R_PREFIX-$label-*.projected.csv \
      --out "$out_dir/$R_PREFIX-$label" >/dev/null 2>&1 &&
      echo "plot: $out_dir/$R_PREFIX-$label/time_to_accuracy.png"
  done
  echo "$t1 s, $t2 s: training seconds to the target (loss.csv's step times; oversubscribed when"
  echo "the machine has fewer cores than ranks); proj.: steps to it x the step planned from the op"
  echo "costs the start-up timed; samples: to the first target; best: the best $R_METRIC; '-': not reached."
}

for part in "${parts[@]}"; do
  case $part in
    table) table mlp "$mlp_config" accuracy "${mlp_budget[@]}" --set eval_every=0 ;;
    gpt) table gpt launch/configs/gpt-kjv.conf val_loss --set text_file="$(launch/text-corpus.sh)" \
           --set steps="$gpt_steps" --set eval_every="$gpt_eval_every" ;;
    race) race mlp ;;
    gpt-race) race gpt ;;
    *) echo "bench_memory: part $part, expected table, gpt, race or gpt-race" >&2; exit 2 ;;
  esac
done
