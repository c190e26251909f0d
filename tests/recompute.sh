#!/usr/bin/env bash
# recompute = stage (docs/pipeline.md, "Recomputation"): a stage keeps only its input per
# micro-batch in flight and reruns its forward before the micro-batch's backward. The runs end
# with byte-identical losses and parameters to recompute = none: bp in every schedule and fg+bp's
# bubble backprop, on 1, 2 and 4 stages, the MLP and the byte GPT; the runs keep less (their
# summary's stash_bytes_stage; a split backward keeps the stage's output adjoint alone from Bi
# to Bw, which redoes Bi), fgpipe plan counts less, and a mode or option that cannot take it is
# refused by name. FGPIPE_TIER=rest: each case on the stage counts below that the later checks
# read (1 and 4 for 1F1B), long: on the others.
#
# usage: recompute.sh FGPIPE CONFIG   (CONFIG: the MLP's; the GPT's is gpt-kjv.conf beside it)
. "$(dirname "$0")/lib.sh" "$@"
gpt_config=$(dirname "$config")/gpt-kjv.conf
docs_corpus
steps=12
small_mnist 4096 1000  # the runs are compared with each other: a slice of the data does
mlp=(--config "$config" --set model=784-64-32-16-10 --set micro_batches=4
     --set data_dir="$dir/mnist")
gpt=(--config "$gpt_config" --set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=32
     --set n_head=2 --set ctx=16 --set eval_every=0)
sgd=(optimizer=sgd lr=0.0001)

# run NAME M MODEL KEY=VALUE...: trains on M stages into $dir/NAME/, $dir/NAME.bin and
# $dir/NAME.json (MODEL: mlp or gpt).
run() {
  local name=$1 M=$2 model=$3; shift 3
  local sets=() kv
  for kv in "$@"; do sets+=(--set "$kv"); done
  local -n args=$model
  timeout 120 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train "${args[@]}" --set steps=$steps --set warmup_steps=0 \
    --set print_every=1000000 --set stages="$M" "${sets[@]}" --out "$dir/$name" \
    --save-params "$dir/$name.bin" --summary-json "$dir/$name.json" --no-checkpoint >"$dir/$name.log" 2>&1 ||
    echo "mpirun -np $M exited with $?: $(grep -m1 -i error "$dir/$name.log")" >"$dir/$name.problem"
}

same() {  # same LABEL A B: identical step,loss,lr columns and parameters
  local a=$2 b=$3 why=""
  for r in "$a" "$b"; do [ -f "$dir/$r.problem" ] && why="$r: $(cat "$dir/$r.problem")"; done
  if [ -z "$why" ]; then
    [ "$(wc -l <"$dir/$a/loss.csv")" -eq $((steps + 1)) ] || why="$a: loss.csv is incomplete"
    cmp -s <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") || why="$why losses differ"
    cmp -s "$dir/$a.bin" "$dir/$b.bin" ||
      why="$why params differ ($(cmp -l "$dir/$a.bin" "$dir/$b.bin" 2>/dev/null | wc -l) bytes)"
  fi
  verdict "$1" "$why"
}

# MODEL|NAME|STAGES (rest)|STAGES (long)|KEY=VALUE...
cases=(
  "mlp|bp-gpipe|2|1 4|mode=bp schedule=gpipe"
  "mlp|bp-1f1b|1 4|2|mode=bp schedule=1f1b"
  "mlp|bp-zb|4|1 2|mode=bp schedule=zb"
  "mlp|fgbp-cv-lag1-sel2|4|1 2|mode=fg+bp estimator=cv lag=1 select=2 ${sgd[*]}"
  "mlp|fgbp-mix-activity-sel1|2|4|mode=fg+bp estimator=mix shrink=0.5 perturb=activity select=1 ${sgd[*]}"
  "mlp|fgbp-local-sel1|4||mode=fg+bp estimator=mix shrink=0.5 perturb=activity local_groups=4 tangents=2 select=1 ${sgd[*]}"
  "mlp|fgbp-auto|4||mode=fg+bp ${sgd[*]}"
  "gpt|gpt-bp-1f1b|2|1 4|mode=bp schedule=1f1b"
  "gpt|gpt-bp-zb|4|2|mode=bp schedule=zb"
  "gpt|gpt-fgbp-cv-lag1-sel1|2|1 4|mode=fg+bp estimator=cv select=1 lag=1 ${sgd[*]}"
)
for c in "${cases[@]}"; do
  IFS='|' read -r model name rest long sets <<<"$c"
  read -r -a sets <<<"$sets"
  for M in $(in_tier rest && echo "$rest") $(in_tier long && echo "$long"); do
    run "$name-M$M" "$M" "$model" "${sets[@]}"
    run "$name-M$M-rc" "$M" "$model" "${sets[@]}" recompute=stage
    same "$name on $M stage(s): recompute = stage equals none" "$name-M$M" "$name-M$M-rc"
  done
done

in_tier rest || finish
# GPipe keeps every micro-batch's stash until its B: with recompute, the inputs and one rerun's
# stash, less on every stage (the MLP's and the GPT's).
for name in bp-gpipe-M2 gpt-bp-1f1b-M2; do
  verdict "$name: recompute keeps less on every stage (stash_bytes_stage)" "$(
    py_check "$dir/$name.json" "$dir/$name-rc.json" "$name" <<'PY'
import json, sys
none, rc = (json.load(open(p))["stash_bytes_stage"] for p in sys.argv[1:3])
if sys.argv[3].startswith("gpt"):  # 1F1B on 2 stages: stage 0 keeps 2 of 4, the last 1
    none, rc = none[:1], rc[:1]
if not all(r < n for r, n in zip(rc, none)):
    print(f"recompute {rc} against none {none} bytes")
PY
  )"
done

# A split backward (fg+bp, zb) with recompute: Bi keeps the stage's output adjoint alone for
# Bw, none on the last stage (Bw reads its dz), and the largest stage keeps no more (the
# timetables differ: Bw is planned longer, so a stage may hold more of the smaller buffers).
for name in fgbp-cv-lag1-sel2-M4 bp-zb-M4 gpt-fgbp-cv-lag1-sel1-M2; do
  verdict "$name: recompute keeps no more activations, the last stage no adjoints for Bw" "$(
    py_check "$dir/$name.json" "$dir/$name-rc.json" <<'PY'
import json, sys
none, rc = (json.load(open(p)) for p in sys.argv[1:3])
peak_none, peak_rc = none["activation_peak_bytes"], rc["activation_peak_bytes"]
kept_none, kept_rc = none["memory_bytes"]["kept_adjoints"], rc["memory_bytes"]["kept_adjoints"]
if max(peak_rc) > max(peak_none):
    print(f"activation peaks: recompute {peak_rc} against none {peak_none} bytes")
if kept_rc[-1] != 0 or kept_none[-1] <= 0:
    print(f"kept adjoints: recompute {kept_rc} against none {kept_none} bytes")
PY
  )"
done

# fgpipe plan counts the rerun's memory: bp-gpipe's activations less on every stage.
for r in none stage; do
  "$fgpipe" plan "${mlp[@]}" --set stages=4 --set recompute=$r --json "$dir/plan-$r.json" \
    >"$dir/plan-$r.txt" 2>&1 || echo "fgpipe plan exited with $?" >"$dir/plan.problem"
done
verdict "fgpipe plan: bp-gpipe's activations with recompute less on every stage" "$(
  [ -f "$dir/plan.problem" ] && cat "$dir/plan.problem" ||
  py_check "$dir/plan-none.json" "$dir/plan-stage.json" <<'PY'
import json, sys
none, rc = ([s for s in json.load(open(p))["schedules"] if s["schedule"] == "bp-gpipe"][0]["activation_bytes"]
            for p in sys.argv[1:3])
if not all(r < n for r, n in zip(rc, none)):
    print(f"recompute {rc} against none {none} bytes")
PY
)"

# Bad input: a mode without a backward, and streamed stages, are refused by name.
refused() {  # refused LABEL WORD KEY=VALUE...: the run fails and its error names WORD
  local label=$1 word=$2 sets=() kv; shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  "$fgpipe" train "${mlp[@]}" --set steps=1 "${sets[@]}" --no-checkpoint >/dev/null 2>"$dir/bad.err"
  local rc=$?
  if [ $rc -ne 0 ] && grep -q "recompute" "$dir/bad.err" && grep -q "$word" "$dir/bad.err"; then
    verdict "$label" ""
  else
    verdict "$label" "exit $rc: $(head -c 300 "$dir/bad.err")"
  fi
}
refused "recompute with mode = fg is refused by name" "mode" mode=fg recompute=stage
refused "recompute out of core (mem_budget) is refused by name" "mem_budget" recompute=stage \
  mem_budget=1000000 weights_dir="$dir/w"
refused "an unknown recompute value is refused" "none|stage" recompute=layer
finish
