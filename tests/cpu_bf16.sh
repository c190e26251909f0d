#!/usr/bin/env bash
# precision = bf16 on the CPU end to end (oneDNN's BF16 matmul, src/math/gemm_bf16.c): a small
# GPT (2 blocks, n_embd 64, 4 heads, ctx 32) on a corpus made here (this repository's docs) for
# 50 bp steps in fp32 and in bf16 on one stage, and in bf16 on 2 stages; fg+bp (activity
# perturbation) in bf16 on one stage. Checks:
# - bf16's loss falls (the last step's is below the first's by 0.5 nats) and its per-step losses
#   stay within 2% of fp32's;
# - 2 stages give the losses and parameters of 1 in bf16, byte for byte (a stage's products
#   are the same calls whatever the cut);
# - fg+bp (activity perturbation: the JVP's products too) in bf16 stays within 2% of fp32's.
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

train_on fp32 1 mode=bp precision=fp32
train_on bf16 1 mode=bp precision=bf16
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
finish
