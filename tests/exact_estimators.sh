#!/usr/bin/env bash
# Every fg+bp estimator that claims to reduce to backprop does, bit for bit. With every
# micro-batch backpropagated (select = micro_batches) and the forward gradient weighed 0, the
# update is the exact gradient c: at lag 0 it is bp's, and at lag L it is bp's applied L steps
# late (bp with grad_delay = L, none in the first L steps). Which c each estimator uses:
#   mix (activity, weight, local losses), shrink 0: this step's c, made at lag L  -> delay L
#   cv, shrink 0 or 1, lag 0: the step's micro-batches are all exact             -> delay 0
#   cv, shrink 0, lag L > 0: its reference, the c of the step before (dotted in F) -> delay L + 1
# select = -1 with c alone chooses its timetable (timetable_choice.c); at max_lag 0 every
# candidate that corrects every stage backprops all micro-batches at lag 0 (bp-zb's timetable or
# fg+bp's): bp's weights whichever it chose.
# Reference and candidate share the 1F1B order of micro-batches 0..N-1 per stage, hence the
# same float accumulation order: losses and parameters must be byte-identical, on 1 and on
# several stages, for the MLP and the GPT (its tied embedding summed across the end stages).
#
# usage: exact_estimators.sh FGPIPE CONFIG   (CONFIG: the MLP config; the GPT's is beside it)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
gpt_config=$(realpath "$root/launch/configs/gpt-kjv.conf")
docs_corpus
steps=20
small_mnist 4096 1000  # the runs are compared with each other: a slice of the data does
mlp=(--config "$config" --set model=784-64-32-16-10 --set micro_batches=4
     --set data_dir="$dir/mnist")
gpt=(--config "$gpt_config" --set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=32
     --set n_head=2 --set ctx=16 --set micro_batch=2 --set micro_batches=4 --set eval_every=0)
common=(--set steps=$steps --set warmup_steps=0 --set optimizer=adam --set lr=0.001
        --set print_every=1000000)
exact=(mode=fg+bp select=4)

# run MODEL NAME M KEY=VALUE...: trains on M stages into $dir/NAME/ and $dir/NAME.bin.
run() {
  local model=$1 name=$2 M=$3; shift 3
  local sets=() kv
  local -n base=$model
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train "${base[@]}" "${common[@]}" --set stages="$M" "${sets[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" --no-checkpoint >"$dir/$name.log" 2>&1 ||
    echo "mpirun -np $M exited with $?: $(grep -m1 error "$dir/$name.log")" >"$dir/$name.problem"
}

# same LABEL A B: runs A and B have identical step,loss,lr columns and identical parameters.
same() {
  local a=$2 b=$3 why=""
  for r in "$a" "$b"; do [ -f "$dir/$r.problem" ] && why="$r: $(cat "$dir/$r.problem")"; done
  if [ -z "$why" ]; then
    cmp -s <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") ||
      why="losses differ (first: $(diff <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") | grep -m1 '^>' | cut -c3-))"
    cmp -s "$dir/$a.bin" "$dir/$b.bin" ||
      why="$why params differ ($(cmp -l "$dir/$a.bin" "$dir/$b.bin" 2>/dev/null | wc -l) bytes)"
  fi
  verdict "$1" "$why"
}

# Each case: MODEL|NAME|M|DELAY|KEY=VALUE... : fg+bp (select = 4) on M stages vs bp delayed DELAY.
cases=(
  "mlp|mix-activity|1|0|lag=0 estimator=mix shrink=0 perturb=activity"
  "mlp|mix-activity|4|0|lag=0 estimator=mix shrink=0 perturb=activity"
  "mlp|mix-weight|4|0|lag=0 estimator=mix shrink=0 perturb=weight"
  "mlp|mix-local-G4-K2|4|0|lag=0 estimator=mix shrink=0 perturb=activity local_groups=4 tangents=2"
  "mlp|cv-shrink0|4|0|lag=0 estimator=cv shrink=0 perturb=weight"
  "mlp|cv|4|0|lag=0 estimator=cv perturb=weight"
  "mlp|mix-activity-lag1|4|1|lag=1 estimator=mix shrink=0 perturb=activity"
  "mlp|mix-weight-lag1|2|1|lag=1 estimator=mix shrink=0 perturb=weight"
  "mlp|mix-local-G4-K2-lag1|4|1|lag=1 estimator=mix shrink=0 perturb=activity local_groups=4 tangents=2"
  "mlp|mix-activity-lag2|4|2|lag=2 estimator=mix shrink=0 perturb=activity"
  "mlp|cv-shrink0-lag1|4|2|lag=1 estimator=cv shrink=0 perturb=weight"
  "mlp|mix-chosen-lag0|2|0|select=-1 max_lag=0 lag_cost=10 estimator=mix shrink=0 perturb=activity"
  "gpt|mix-activity|1|0|lag=0 estimator=mix shrink=0 perturb=activity"
  "gpt|mix-activity|3|0|lag=0 estimator=mix shrink=0 perturb=activity"
  "gpt|mix-weight|3|0|lag=0 estimator=mix shrink=0 perturb=weight"
  "gpt|cv|3|0|lag=0 estimator=cv perturb=weight"
  "gpt|mix-activity-lag1|3|1|lag=1 estimator=mix shrink=0 perturb=activity"
  "gpt|mix-weight-lag2|2|2|lag=2 estimator=mix shrink=0 perturb=weight"
  "gpt|mix-chosen-lag0|3|0|select=-1 max_lag=0 lag_cost=10 estimator=mix shrink=0 perturb=activity"
)
for model in mlp gpt; do
  for delay in 0 1 2; do run $model "$model-bp-delay$delay" 1 mode=bp schedule=1f1b grad_delay=$delay; done
done
for c in "${cases[@]}"; do
  IFS='|' read -r model name M delay sets <<<"$c"
  read -r -a sets <<<"$sets"
  run "$model" "$model-$name-M$M" "$M" "${exact[@]}" "${sets[@]}"
  same "$model $name (M=$M) vs bp grad_delay=$delay" "$model-bp-delay$delay" "$model-$name-M$M"
done

# The delayed references differ from each other (else the lag cases would prove nothing).
cmp -s "$dir/mlp-bp-delay0.bin" "$dir/mlp-bp-delay1.bin" &&
  verdict "bp grad_delay=1 differs from grad_delay=0" "the parameters are equal" ||
  verdict "bp grad_delay=1 differs from grad_delay=0" ""

# mix with shrink 0 on a stage that backpropagates nothing would never learn: refused by name
# (select = -1 never chooses such a timetable: it backprops every micro-batch instead).
run mlp never-learns 2 mode=fg+bp estimator=mix shrink=0 select=0
grep -q "stage 0 backpropagates no micro-batch" "$dir/never-learns.log" && [ -f "$dir/never-learns.problem" ] &&
  verdict "mix shrink=0 without bubbles: refused" "" ||
  verdict "mix shrink=0 without bubbles: refused" "$(tail -n 1 "$dir/never-learns.log")"
run mlp delay-fgbp 1 mode=fg+bp grad_delay=1
grep -q "grad_delay applies to mode = bp" "$dir/delay-fgbp.log" &&
  verdict "grad_delay outside bp: refused" "" ||
  verdict "grad_delay outside bp: refused" "$(tail -n 1 "$dir/delay-fgbp.log")"

finish
