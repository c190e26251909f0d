#!/usr/bin/env bash
# precision = bf16 on the CPU end to end (oneDNN's BF16 matmul, src/math/gemm_bf16.c): a small
# GPT (2 blocks, n_embd 64, 4 heads, ctx 32) on a corpus made here (this repository's docs) for
# 50 bp steps in fp32 and in bf16 on one stage, and in bf16 on 2 stages; fg+bp (activity
# perturbation) in bf16 on one stage. Checks:
# - bf16's loss falls (the last step's is below the first's by 0.5 nats) and its per-step losses
#   stay within 2% of fp32's;
# - 2 stages give the losses and parameters of 1 in bf16, byte for byte (a stage's products
#   are the same calls whatever the cut);
# - fg+bp (activity perturbation: the JVP's products too) in bf16 stays within 2% of fp32's;
# - the stash holds BF16 activations: summary.json's stash bytes of bf16 are half of fp32's (but
#   for the FP32 token ids the embedding reads and the head's FP32 records), and fgpipe plan
#   counts half the stash and half the bytes of op F's messages;
# - checkpoints hold FP32 masters: bf16 stopped on 2 stages (SIGUSR1) and resumed on 1 and on 2
#   ends with the uninterrupted run's parameters and losses, byte for byte, and an fp32 run
#   resumes from the bf16 checkpoint.
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

train_on fp32 1 mode=bp precision=fp32 -- --summary-json "$dir/fp32.json"
train_on bf16 1 mode=bp precision=bf16 -- --summary-json "$dir/bf16.json"
train_on bf16-2 2 mode=bp precision=bf16
fgbp=(mode=fg+bp perturb=activity estimator=mix shrink=0.5)
train_on fgbp-fp32 1 "${fgbp[@]}" precision=fp32
train_on fgbp-bf16 1 "${fgbp[@]}" precision=bf16
within_2pc() {  # within_2pc LABEL RUN FP32_RUN
  local why; why=$(problem "$2")$(problem "$3")
  [ -n "$why" ] || why=$(awk -v w="$(loss_diff "$dir/$2/loss.csv" "$dir/$3/loss.csv")" \
    'BEGIN { if (!(w <= 0.02)) printf "worst relative difference %s", w }')
  verdict "$1" "$why"
}
falls bf16
within_2pc "bp: bf16's losses within 2% of fp32's over 50 steps" bf16 fp32
grep -q "^precision = bf16" "$dir/bf16/config.txt" || verdict "bf16 ran in bf16" "config.txt says otherwise"
same_runs "bf16: 2 stages give the losses and parameters of 1, byte for byte" bf16 bf16-2
within_2pc "fg+bp: bf16's losses within 2% of fp32's over 50 steps" fgbp-bf16 fgbp-fp32
verdict "bf16: the stash holds half the bytes of fp32's" "$(py_check "$dir/bf16.json" "$dir/fp32.json" <<'PY'
import json, sys
half, full = (json.load(open(f))["memory_bytes"]["stash"][0] for f in sys.argv[1:])
if not (full > 0 and 0.5 <= half / full <= 0.53): print(f"stash bytes {half} (bf16) against {full} (fp32)")
PY
)"

# fgpipe plan counts the same: bp on a fixed cut of 2 stages, fp32 against bf16.
for p in fp32 bf16; do
  "$fgpipe" plan --config "$config" "${base[@]}" --set stages=2 --set boundaries=5 --set mode=bp \
    --set precision=$p --json "$dir/plan-$p.json" >"$dir/plan-$p.out" 2>&1 ||
    echo "fgpipe plan ($p) exited with $?: $(tail -n 1 "$dir/plan-$p.out")" >"$dir/plan-$p.problem"
done
why=$(problem plan-fp32)$(problem plan-bf16)
[ -n "$why" ] || why=$(py_check "$dir/plan-bf16.json" "$dir/plan-fp32.json" <<'PY'
import json, sys
half, full = (json.load(open(f))["schedules"][0] for f in sys.argv[1:])
for s in range(2):
    a, b = half["memory_bytes"]["stash"][s], full["memory_bytes"]["stash"][s]
    if not (b > 0 and 0.5 <= a / b <= 0.53): print(f"stage {s}: stash {a} (bf16) against {b} (fp32)")
a, b = half["sent_bytes"], full["sent_bytes"]
if not (b[0] > 0 and a[0] * 2 == b[0] and a[1] == b[1]): print(f"sent bytes {a} (bf16) against {b} (fp32)")
PY
)
verdict "fgpipe plan: bf16's stash half of fp32's, stage 0's messages (activations) half, stage 1's (adjoints) equal" "$why"

# Stopped by SIGUSR1 once the log has 20 steps (mpirun forwards it to every rank; the timeout
# around it must not get it).
train_on bf16-stopped 2 mode=bp precision=bf16 &
run=$!
for _ in $(seq 1200); do
  [ -f "$dir/bf16-stopped/loss.csv" ] && [ "$(wc -l <"$dir/bf16-stopped/loss.csv")" -gt 20 ] && break
  sleep 0.05
done
pkill -USR1 -f "^mpirun .*--out $dir/bf16-stopped( |$)"
wait "$run"
step=$(grep -o "stopped by a signal after step [0-9]*" "$dir/bf16-stopped.log" | grep -o "[0-9]*$")
for M in 1 2; do
  train_on "bf16-resumed$M" "$M" mode=bp precision=bf16 -- --resume "$dir/bf16-stopped"
  why=$(problem "bf16-resumed$M")
  [ -n "$step" ] || why="the run was not stopped by the signal: $(tail -n 1 "$dir/bf16-stopped.log")"
  [ -n "$why" ] || cmp -s "$dir/bf16.bin" "$dir/bf16-resumed$M.bin" || why="parameters differ"
  [ -n "$why" ] || h5diff -q "$dir/bf16/checkpoint.h5" "$dir/bf16-resumed$M/checkpoint.h5" /optimizer \
    /optimizer || why="$why optimizer state differs"
  [ -n "$why" ] || cmp -s <(cut -d, -f1-3 "$dir/bf16/loss.csv" | tail -n +$((step + 2))) \
    <(cut -d, -f1-3 "$dir/bf16-resumed$M/loss.csv" | tail -n +2) || why="losses differ"
  verdict "bf16: stopped on 2 stages after step ${step:-?}, resumed on $M = uninterrupted (bitwise)" "$why"
done
train_on bf16-to-fp32 1 mode=bp precision=fp32 -- --resume "$dir/bf16-stopped"
why=$(problem bf16-to-fp32)
[ -n "$why" ] || why=$(awk -F, 'NR > 1 { n++; if (!($2 < 10)) bad = $2 } END { if (!n || bad != "") printf "loss %s", bad }' \
  "$dir/bf16-to-fp32/loss.csv")
verdict "a bf16 checkpoint resumes in an fp32 run" "$why"
finish
