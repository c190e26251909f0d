#!/usr/bin/env bash
# precision = bf16 on the CPU end to end (oneDNN's BF16 matmul, src/math/gemm_bf16.c): a small
# GPT (2 blocks, n_embd 64, 4 heads, ctx 32) on a corpus made here (this repository's docs) for
# 50 steps in fp32 and in bf16, on 1 stage and on 2. Activations, the JVP's tangents and
# backprop's adjoints are BF16 at every layer boundary (stage_act.c). Checks:
# - bf16's loss falls (the last step's is below the first's by 0.5 nats) and its per-step losses
#   stay within 2% of fp32's;
# - 2 stages give the losses and parameters of 1, byte for byte, in bf16: bp-zb (the adjoints
#   rounded at the cut, Bi's kept adjoints in BF16; 1F1B on 2 stages too), fg (weight
#   perturbation, its default estimator: the tangents cross the cut in BF16), fg+bp with weight
#   perturbation and cv (tangents and adjoints; also with recompute = stage on 2 stages against
#   1 without), fg+bp's defaults (activity, mix at shrink 0: no tangents) and fg+bp with
#   activity perturbation and mix at shrink 0.5 (a stage's products are the same calls on the
#   same BF16 values whatever the cut);
# - fg+bp (activity perturbation: the JVP's products too) in bf16 stays within 2% of fp32's;
# - the stash holds BF16 activations: summary.json's stash bytes of bf16 are half of fp32's (but
#   for the FP32 token ids the embedding reads and the head's FP32 records), and fgpipe plan
#   counts half the stash and half the bytes of op F's and op B's messages (bp), and of op F's
#   messages with their K tangents (fg+bp, weight perturbation, cv);
# - activity perturbation keeps the layers' inputs for U in BF16: summary.json's kept_inputs of
#   fg+bp (activity) in bf16 are fp32's less half its saved inputs, plus U's one-layer widened
#   FP32 copy beside its FP32 G block (0.5-0.75 of fp32's here), and fgpipe plan counts them so;
# - the message buffers (inbox, outbox) are sized in BF16: summary.json's and fgpipe plan's
#   "messages" owner of a 2-stage fg+bp run are half of fp32's on each stage;
# - checkpoints hold FP32 masters: bf16 stopped on 2 stages (SIGUSR1) and resumed on 1 and on 2
#   ends with the uninterrupted run's parameters and losses, byte for byte, in bp and in fg+bp,
#   and an fp32 run resumes from the bf16 checkpoint.
# The long tier (cpu_bf16_long) runs 1F1B, recompute, fg+bp's defaults and fg+bp's resume.
# Skipped (77) on a CPU without avx512_bf16, where cli_errors checks the refusal.
# usage: cpu_bf16.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
if ! grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "cpu_bf16: SKIPPED: this CPU lacks avx512_bf16 (the refusal is cli_errors's)" >&2; exit 77
fi
docs_corpus
base=(--set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=64 --set n_head=4
      --set ctx=32 --set micro_batch=4 --set micro_batches=4 --set steps=50 --set warmup_steps=0
      --set eval_every=0 --set print_every=1000000 --set select=2)

problem() { [ -f "$dir/$1.problem" ] && cat "$dir/$1.problem"; }
falls() {  # falls NAME: a verdict that the run's last loss is below its first by 0.5 nats
  local why; why=$(problem "$1")
  [ -n "$why" ] || why=$(awk -F, 'NR == 2 { a = $2 } NR > 1 { b = $2 }
    END { if (!(b < a - 0.5)) printf "loss %s -> %s", a, b }' "$dir/$1/loss.csv")
  verdict "$1: the loss falls" "$why"
}

# stop_resume LABEL REF STOPPED KEY=VALUE...: STOPPED trained on 2 stages in bf16 and stopped by
# SIGUSR1 once its log has 20 steps (mpirun forwards it to every rank; the timeout around it must
# not get it), then resumed on 1 and on 2 stages: each ends with REF's parameters, optimizer
# state and losses (REF: the same run uninterrupted), byte for byte.
stop_resume() {
  local label=$1 ref=$2 name=$3; shift 3
  train_on "$name" 2 "$@" precision=bf16 &
  local run=$! step M why
  for _ in $(seq 1200); do
    [ -f "$dir/$name/loss.csv" ] && [ "$(wc -l <"$dir/$name/loss.csv")" -gt 20 ] && break
    sleep 0.05
  done
  pkill -USR1 -f "^mpirun .*--out $dir/$name( |$)"
  wait "$run"
  step=$(grep -o "stopped by a signal after step [0-9]*" "$dir/$name.log" | grep -o "[0-9]*$")
  for M in 1 2; do
    train_on "$name-resumed$M" "$M" "$@" precision=bf16 -- --resume "$dir/$name"
    why=$(problem "$name-resumed$M")$(problem "$ref")
    [ -n "$step" ] || why="the run was not stopped by the signal: $(tail -n 1 "$dir/$name.log")"
    [ -n "$why" ] || cmp -s "$dir/$ref.bin" "$dir/$name-resumed$M.bin" || why="parameters differ"
    [ -n "$why" ] || h5diff -q "$dir/$ref/checkpoint.h5" "$dir/$name-resumed$M/checkpoint.h5" /optimizer \
      /optimizer || why="$why optimizer state differs"
    [ -n "$why" ] || cmp -s <(cut -d, -f1-3 "$dir/$ref/loss.csv" | tail -n +$((step + 2))) \
      <(cut -d, -f1-3 "$dir/$name-resumed$M/loss.csv" | tail -n +2) || why="losses differ"
    verdict "$label: stopped on 2 stages after step ${step:-?}, resumed on $M = uninterrupted (bitwise)" "$why"
  done
}
fgbp=(mode=fg+bp perturb=activity estimator=mix shrink=0.5)
fgbpw=(mode=fg+bp perturb=weight estimator=cv)
# The long tier (ctest -L long: cpu_bf16_long) takes the variants whose behaviour a case of the
# full suite's already shows: 1F1B beside bp-zb, recompute, fg+bp's defaults, fg+bp's resume
# beside bp's (with the references they compare with).
train_on bf16 1 mode=bp precision=bf16 -- --summary-json "$dir/bf16.json"
train_on fgbpw-bf16 1 "${fgbpw[@]}" precision=bf16
if in_tier long; then
  train_on bf16-1f1b-2 2 mode=bp schedule=1f1b precision=bf16
  train_on fgbpw-recompute-2 2 "${fgbpw[@]}" recompute=stage precision=bf16
  train_on fgbpd-bf16 1 mode=fg+bp precision=bf16
  train_on fgbpd-bf16-2 2 mode=fg+bp precision=bf16
  same_runs "bf16, bp-1f1b on 2 stages = bp-zb on 1, byte for byte" bf16 bf16-1f1b-2
  same_runs "bf16, fg+bp (weight perturbation, cv) with recompute on 2 stages = without on 1, byte for byte" \
    fgbpw-bf16 fgbpw-recompute-2
  same_runs "bf16, fg+bp (its defaults: mix at shrink 0, no tangents): 2 stages = 1, byte for byte" fgbpd-bf16 \
    fgbpd-bf16-2
  stop_resume "bf16, fg+bp (weight perturbation, cv)" fgbpw-bf16 fgbpw-stopped "${fgbpw[@]}"
  [ "$tier" = long ] && finish
fi
train_on fp32 1 mode=bp precision=fp32 -- --summary-json "$dir/fp32.json"
train_on bf16-2 2 mode=bp precision=bf16
train_on fgbp-fp32 1 "${fgbp[@]}" precision=fp32 -- --summary-json "$dir/fgbp-fp32.json"
train_on fgbp-bf16 1 "${fgbp[@]}" precision=bf16 -- --summary-json "$dir/fgbp-bf16.json"
train_on fgbp-bf16-2 2 "${fgbp[@]}" precision=bf16
train_on fg-bf16 1 mode=fg perturb=weight precision=bf16
train_on fg-bf16-2 2 mode=fg perturb=weight precision=bf16
train_on fgbpw-bf16-2 2 "${fgbpw[@]}" precision=bf16 -- --summary-json "$dir/fgbpw-bf16-2.json"
train_on fgbpw-fp32-2 2 "${fgbpw[@]}" precision=fp32 -- --summary-json "$dir/fgbpw-fp32-2.json"
within_2pc() {  # within_2pc LABEL RUN FP32_RUN
  local why; why=$(problem "$2")$(problem "$3")
  [ -n "$why" ] || why=$(awk -v w="$(loss_diff "$dir/$2/loss.csv" "$dir/$3/loss.csv")" \
    'BEGIN { if (!(w <= 0.02)) printf "worst relative difference %s", w }')
  verdict "$1" "$why"
}
falls bf16
within_2pc "bp: bf16's losses within 2% of fp32's over 50 steps" bf16 fp32
grep -q "^precision = bf16" "$dir/bf16/config.txt" || verdict "bf16 ran in bf16" "config.txt says otherwise"
same_runs "bf16, bp-zb: 2 stages give the losses and parameters of 1, byte for byte" bf16 bf16-2
same_runs "bf16, fg (weight perturbation, BF16 tangents): 2 stages = 1, byte for byte" fg-bf16 fg-bf16-2
same_runs "bf16, fg+bp (weight perturbation, cv): 2 stages = 1, byte for byte" fgbpw-bf16 fgbpw-bf16-2
same_runs "bf16, fg+bp (activity perturbation, mix): 2 stages = 1, byte for byte" fgbp-bf16 fgbp-bf16-2
within_2pc "fg+bp: bf16's losses within 2% of fp32's over 50 steps" fgbp-bf16 fgbp-fp32
verdict "bf16: the stash holds half the bytes of fp32's" "$(py_check "$dir/bf16.json" "$dir/fp32.json" <<'PY'
import json, sys
half, full = (json.load(open(f))["memory_bytes"]["stash"][0] for f in sys.argv[1:])
if not (full > 0 and 0.5 <= half / full <= 0.53): print(f"stash bytes {half} (bf16) against {full} (fp32)")
PY
)"

# Activity's kept inputs: the saved inputs of 15 layers in BF16 (half), U's two one-layer FP32
# blocks (G; the widest layer's inputs widened): 0.73 of fp32's here. fgpipe plan --costs of the
# bf16 run counts the same.
why=$(problem fgbp-bf16)$(problem fgbp-fp32) sets=()
for s in "${fgbp[@]}"; do sets+=(--set "$s"); done
[ -n "$why" ] || "$fgpipe" plan --config "$config" "${base[@]}" --set stages=1 "${sets[@]}" \
  --set precision=bf16 --costs "$dir/fgbp-bf16.json" --json "$dir/plan-fgbp-bf16.json" >"$dir/plan-fgbp.out" 2>&1 ||
  why="fgpipe plan (fg+bp, activity, bf16) exited with $?: $(tail -n 1 "$dir/plan-fgbp.out")"
[ -n "$why" ] || why=$(py_check "$dir/fgbp-bf16.json" "$dir/fgbp-fp32.json" "$dir/plan-fgbp-bf16.json" <<'PY'
import json, sys
half, full = (json.load(open(f))["memory_bytes"]["kept_inputs"][0] for f in sys.argv[1:3])
plan = [s for s in json.load(open(sys.argv[3]))["schedules"] if s["schedule"] == "fg+bp"][0]
planned = plan["memory_bytes"]["kept_inputs"][0]
if not (full > 0 and 0.5 <= half / full <= 0.75): print(f"kept inputs {half} (bf16) against {full} (fp32)")
if abs(planned - half) > 0.1 * half: print(f"planned kept inputs {planned}, the run's {half} (bf16)")
PY
)
verdict "fg+bp (activity): bf16's kept inputs for U 0.5-0.75 of fp32's, and fgpipe plan counts them" "$why"

# fgpipe plan counts the same: bp and fg+bp (weight perturbation) on a fixed cut of 2 stages,
# fp32 against bf16.
for p in fp32 bf16; do
  for mode in bp fg+bp; do
    "$fgpipe" plan --config "$config" "${base[@]}" --set stages=2 --set boundaries=5 --set mode=$mode \
      --set perturb=weight --set estimator=cv --set precision=$p --json "$dir/plan-$mode-$p.json" \
      >"$dir/plan-$mode-$p.out" 2>&1 ||
      echo "fgpipe plan ($mode, $p) exited with $?: $(tail -n 1 "$dir/plan-$mode-$p.out")" \
        >"$dir/plan-$mode-$p.problem"
  done
done
why=$(problem plan-bp-fp32)$(problem plan-bp-bf16)
[ -n "$why" ] || why=$(py_check "$dir/plan-bp-bf16.json" "$dir/plan-bp-fp32.json" <<'PY'
import json, sys
half, full = (json.load(open(f))["schedules"][0] for f in sys.argv[1:])
for s in range(2):
    a, b = half["memory_bytes"]["stash"][s], full["memory_bytes"]["stash"][s]
    if not (b > 0 and 0.5 <= a / b <= 0.53): print(f"stage {s}: stash {a} (bf16) against {b} (fp32)")
a, b = half["sent_bytes"], full["sent_bytes"]
if not (b[0] > 0 and b[1] > 0 and a[0] * 2 == b[0] and a[1] * 2 == b[1]):
    print(f"sent bytes {a} (bf16) against {b} (fp32)")
PY
)
verdict "fgpipe plan, bp: bf16's stash half of fp32's, stage 0's messages (activations) and stage 1's \
(adjoints) half" "$why"
why=$(problem plan-fg+bp-fp32)$(problem plan-fg+bp-bf16)
[ -n "$why" ] ||
  why=$(py_check "$dir/plan-fg+bp-bf16.json" "$dir/plan-fg+bp-fp32.json" "$dir/plan-bp-fp32.json" <<'PY'
import json, sys
half, full, bp = ([s for s in json.load(open(f))["schedules"] if s["schedule"] == name][0]
                  for f, name in zip(sys.argv[1:], ("fg+bp", "fg+bp", "bp-zb")))
a, b = half["sent_bytes"], full["sent_bytes"]
# fg+bp's F messages carry K tangents beside the activations: more than bp's
if not (b[0] > bp["sent_bytes"][0] > 0 and a[0] * 2 == b[0] and a[1] * 2 == b[1]):
    print(f"sent bytes {a} (bf16) against {b} (fp32), bp's {bp['sent_bytes']} (fp32)")
a, b = half["memory_bytes"]["messages"], full["memory_bytes"]["messages"]
if not (b[0] > 0 and a[0] * 2 == b[0] and a[1] * 2 == b[1]): print(f"messages {a} (bf16) against {b} (fp32)")
PY
)
verdict "fgpipe plan, fg+bp: bf16's messages (with K tangents) and message buffers half of fp32's" "$why"
why=$(problem fgbpw-bf16-2)$(problem fgbpw-fp32-2)
[ -n "$why" ] || why=$(py_check "$dir/fgbpw-bf16-2.json" "$dir/fgbpw-fp32-2.json" <<'PY'
import json, sys
half, full = (json.load(open(f))["memory_bytes"]["messages"] for f in sys.argv[1:])
if not (len(full) == 2 and full[0] > 0 and all(a * 2 == b for a, b in zip(half, full))):
    print(f"messages {half} (bf16) against {full} (fp32)")
PY
)
verdict "fg+bp on 2 stages: summary.json's message buffers of bf16 half of fp32's" "$why"

stop_resume "bf16, bp" bf16 bf16-stopped mode=bp
# A non-finite loss in bf16 names its step and the layer its first non-finite values entered
# (counted where values are rounded between layers, summed over the stages): a NaN planted in
# block 1's MLP weight (stage 2 of 2) shows first at the input of the GELU after it.
cp "$dir/bf16/checkpoint.h5" "$dir/nan.h5"
/usr/bin/python3 -c 'import h5py, sys; h5py.File(sys.argv[1], "r+")["params/h.1.mlp.c_fc/weight"][0, 0] = float("nan")' \
  "$dir/nan.h5"
train_on bf16-nan 2 mode=bp precision=bf16 -- --init-from "$dir/nan.h5"
why=""
grep -q "loss is nan at step 0: .*the first values not finite were the input of layer [0-9]* (h.1.mlp.gelu)" \
  "$dir/bf16-nan.log" || why="error: $(grep -m1 error "$dir/bf16-nan.log")"
[ -f "$dir/bf16-nan.problem" ] || why="$why; the run did not fail"
[ ! -f "$dir/bf16-nan/checkpoint.h5" ] || why="$why; a checkpoint was written"
verdict "bf16: a non-finite loss names the step and the layer its NaN entered (h.1.mlp.gelu)" "$why"

train_on bf16-to-fp32 1 mode=bp precision=fp32 -- --resume "$dir/bf16-stopped"
why=$(problem bf16-to-fp32)
[ -n "$why" ] || why=$(awk -F, 'NR > 1 { n++; if (!($2 < 10)) bad = $2 } END { if (!n || bad != "") printf "loss %s", bad }' \
  "$dir/bf16-to-fp32/loss.csv")
verdict "a bf16 checkpoint resumes in an fp32 run" "$why"
finish
