#!/usr/bin/env bash
# Activation memory measured against planned (issue 43): each run counts, per stage, the bytes of
# activations it holds as they are allocated and freed (stashes, kept adjoints, kept inputs, loss
# adjoints, lanes, messages; summary.json's activation_peak_bytes), and fgpipe plan --costs of
# the same run (the run's stage cuts and timetable) plans the same figure within 10% per stage:
# the main job's MLP on 1 and 4 stages in bp-1f1b, bp-zb (each also with recompute = stage),
# fg (weight, activity, local losses) and fg+bp (also with recompute, and select = 1 with it),
# and a small byte GPT on 1 and 2 stages (bp-zb, fg+bp, fg+bp with recompute). The peaks are
# ordered as the timetables imply: 1F1B's stage 0 keeps more than its last stage, GPipe's
# stashes are all N on every stage, fg keeps no stash, activity keeps inputs that weight
# perturbation does not, local losses fewer. FGPIPE_TIER=rest: every MLP case on 4 stages, bp-zb
# and fg+bp on 1, the GPT on 2 and bp-zb on 1; long: the other cases on 1 stage.
#
# usage: activation_memory.sh FGPIPE MLP_CONFIG   (the GPT config: gpt-kjv.conf beside it)
. "$(dirname "$0")/lib.sh" "$@"
gpt_config=$(dirname "$config")/gpt-kjv.conf
docs_corpus
small_mnist 1024 256  # activations do not depend on how many samples there are
mlp=(--config "$config" --set steps=6 --set print_every=1000000 --set data_dir="$dir/mnist")
gpt=(--config "$gpt_config" --set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=32
     --set n_head=2 --set ctx=16 --set steps=6 --set warmup_steps=0 --set eval_every=0
     --set print_every=1000000)

# run NAME M BASE KEY=VALUE...: trains NAME on M stages (BASE: mlp or gpt), then plans it from
# its summary (--costs: the run's cuts and op costs).
run() {
  local name=$1 M=$2 base=$3; shift 3
  local sets=() kv
  local -n args=$base
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    "${args[@]}" --set stages="$M" "${sets[@]}" --no-checkpoint --summary-json "$dir/$name.json" \
    >"$dir/$name.log" 2>&1 &&
    "$fgpipe" plan "${args[@]}" --set stages="$M" "${sets[@]}" --costs "$dir/$name.json" \
      --json "$dir/$name.plan.json" >"$dir/$name.plan.txt" 2>&1 ||
    echo "$name failed: $(grep -m1 -i error "$dir/$name.log" "$dir/$name.plan.txt")" >"$dir/$name.problem"
}

# planned_as_run NAME SCHEDULE: the plan's SCHEDULE row within 10% of the run, stage by stage.
planned_as_run() {
  if [ -f "$dir/$1.problem" ]; then cat "$dir/$1.problem"; return; fi
  py_check "$dir/$1.json" "$dir/$1.plan.json" "$2" <<'PY'
import json, sys
run, plan, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
measured = run["activation_peak_bytes"]
planned = [s for s in plan["schedules"] if s["schedule"] == name][0]["activation_bytes"]
problems = [f"stage {s}: planned {p:.0f} B, measured {m:.0f} B"
            for s, (p, m) in enumerate(zip(planned, measured)) if not m > 0 or abs(p - m) > 0.1 * m]
if len(planned) != len(measured): problems.append(f"{len(planned)} stages planned, {len(measured)} ran")
print("; ".join(problems))
PY
}

# field NAME KEY STAGE: one stage's figure of the run's summary.json (memory_bytes' KEY, or a list).
field() {
  /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); k=sys.argv[2]; \
v=d['memory_bytes'][k] if k in d['memory_bytes'] else d[k]; print(int(v[int(sys.argv[3])]))" \
    "$dir/$1.json" "$2" "$3" 2>/dev/null || echo -1
}

cases=("1f1b|bp-1f1b|mode=bp schedule=1f1b" "zb|bp-zb|mode=bp schedule=zb"
       "gpipe|bp-gpipe|mode=bp schedule=gpipe" "fgw|fg|mode=fg perturb=weight"
       "fga|fg|mode=fg perturb=activity" "fgl|fg|mode=fg perturb=activity local_groups=8"
       "fgbp|fg+bp|mode=fg+bp"
       "1f1b-rc|bp-1f1b|mode=bp schedule=1f1b recompute=stage" "zb-rc|bp-zb|mode=bp schedule=zb recompute=stage"
       "fgbp-rc|fg+bp|mode=fg+bp recompute=stage" "fgbp1-rc|fg+bp|mode=fg+bp select=1 recompute=stage")
for M in 1 4; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name schedule sets <<<"$c"
    if [ "$M" = 4 ] || [ "$name" = zb ] || [ "$name" = fgbp ]; then in_tier rest || continue
    else in_tier long || continue; fi
    # shellcheck disable=SC2086
    run "mlp$M-$name" "$M" mlp $sets
    verdict "MLP, $M stage(s), $schedule: planned activations within 10% of the run's" \
      "$(planned_as_run "mlp$M-$name" "$schedule")"
  done
done
for M in 1 2; do
  if in_tier rest; then
    run "gpt$M-zb" "$M" gpt mode=bp schedule=zb
    verdict "GPT, $M stage(s), bp-zb: planned activations within 10% of the run's" \
      "$(planned_as_run "gpt$M-zb" bp-zb)"
  fi
  if [ "$M" = 2 ]; then in_tier rest || continue; else in_tier long || continue; fi
  run "gpt$M-fgbp" "$M" gpt mode=fg+bp
  verdict "GPT, $M stage(s), fg+bp: planned activations within 10% of the run's" \
    "$(planned_as_run "gpt$M-fgbp" fg+bp)"
  run "gpt$M-fgbp-rc" "$M" gpt mode=fg+bp recompute=stage
  verdict "GPT, $M stage(s), fg+bp with recompute: planned activations within 10% of the run's" \
    "$(planned_as_run "gpt$M-fgbp-rc" fg+bp)"
done

in_tier rest || finish
keep=$(field mlp4-1f1b activation_peak_bytes 0) rc=$(field mlp4-1f1b-rc activation_peak_bytes 0)
verdict "1F1B on 4 stages, recompute = stage: stage 0 keeps less ($rc B) than without ($keep B)" \
  "$(awk -v a="$rc" -v b="$keep" 'BEGIN { exit !(a > 0 && a < b) }' || echo "not less")"
first=$(field mlp4-1f1b activation_peak_bytes 0) last=$(field mlp4-1f1b activation_peak_bytes 3)
verdict "1F1B on 4 stages: stage 0 keeps more activations ($first B) than the last ($last B)" \
  "$([ "$first" -gt "$last" ] && [ "$last" -gt 0 ] || echo "stage 0 $first B, last $last B")"
g3=$(field mlp4-gpipe stash 3) s3=$(field mlp4-1f1b stash 3)
verdict "the last stage: GPipe stashes all 4 micro-batches ($g3 B), 1F1B one at a time ($s3 B)" \
  "$([ "$s3" -gt 0 ] && [ "$g3" -eq $((4 * s3)) ] || echo "gpipe $g3 B, 1f1b $s3 B")"
fs=$(field mlp4-fgw stash 1) fk=$(field mlp4-fgw kept_inputs 1) ak=$(field mlp4-fga kept_inputs 1)
verdict "fg keeps no stash, weight perturbation no inputs, activity keeps its inputs ($ak B)" \
  "$([ "$fs" -eq 0 ] && [ "$fk" -eq 0 ] && [ "$ak" -gt 0 ] || echo "stash $fs, weight $fk, activity $ak")"
# Local losses fold each estimate in F: a stage of hidden layers keeps its lanes' inputs alone.
lk=$(field mlp4-fgl kept_inputs 1)
verdict "local losses keep less for U ($lk B) than activity on the same stage ($ak B)" \
  "$([ "$lk" -ge 0 ] && [ "$lk" -lt "$ak" ] || echo "local $lk B, activity $ak B")"
zb=$(field mlp4-zb kept_adjoints 0) f1=$(field mlp4-1f1b kept_adjoints 0)
verdict "bp-zb keeps adjoints for its Bw ops ($zb B), 1F1B none" \
  "$([ "$zb" -gt 0 ] && [ "$f1" -eq 0 ] || echo "zb $zb B, 1f1b $f1 B")"
# A frozen layer has no Bw: bp-zb keeps no output adjoint for it (block 0 frozen: less kept).
run gpt1-zb-frozen 1 gpt mode=bp schedule=zb freeze=h.0
verdict "GPT, 1 stage, bp-zb, block 0 frozen: planned activations within 10% of the run's" \
  "$(planned_as_run gpt1-zb-frozen bp-zb)"
zf=$(field gpt1-zb-frozen kept_adjoints 0) za=$(field gpt1-zb kept_adjoints 0)
verdict "bp-zb keeps no adjoints for a frozen block's layers ($zf B, all training: $za B)" \
  "$([ "$zf" -gt 0 ] && [ "$zf" -lt "$za" ] || echo "frozen $zf B, all training $za B")"
w=$(field mlp4-1f1b weights 1) o=$(field mlp4-1f1b optimizer 1)
verdict "memory_bytes: Adam's state is twice the weights on stage 1 ($o B, $w B)" \
  "$([ "$w" -gt 0 ] && [ "$o" -eq $((2 * w)) ] || echo "weights $w, optimizer $o")"
verdict "the result line and the first step's line report the activation peaks" \
  "$(grep -q '^memory: activation peak MiB by stage' "$dir/mlp4-1f1b.log" &&
     grep -q 'activations held after the first step' "$dir/mlp4-1f1b.log" || echo "lines missing")"
finish
