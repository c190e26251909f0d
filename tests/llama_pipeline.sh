#!/usr/bin/env bash
# Llama end to end (docs/gpt.md, "Llama and Qwen3"): the tiny Llama of llama-tiny.conf (grouped-
# query attention, head_dim != n_embd / n_head, llama3 rope scaling, q/k norms, tied head) on the
# King James Bible's first bytes: every mode and perturbation gives byte-identical losses and
# parameters on M = 1 and 2 stages (M = 3 for bp and fg) and streamed out of core, the tied
# copies stay equal, the untied head trains, the loss falls, eval and generate read the
# checkpoint, and bad shapes and what the family has not got (local losses) are refused by name.
#
# usage: llama_pipeline.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
head -c 400000 "$(cd "$root" && launch/text-corpus.sh 2>/dev/null)" >"$dir/kjv.txt"
steps=10 C=32 V=256
base=(--set text_file="$dir/kjv.txt" --set steps=$steps --set warmup_steps=0 --set eval_every=0
      --set print_every=1000000 --set micro_batch=2 --set micro_batches=3)

run() { train_on "$@"; }     # lib.sh: NAME M KEY=VALUE... [-- ARGS], into $dir/NAME/, NAME.bin
same() { same_runs "$@"; }   # lib.sh: LABEL A B

cases=(
  "bp|mode=bp|3"
  "bp-zb|mode=bp schedule=zb|2"
  "fg|mode=fg optimizer=sgd lr=0.0001|3"
  "fgbp-cv-sel1-lag1|mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001|2"
  "fg-lowrank-r2|mode=fg tangent_rank=2 optimizer=sgd lr=0.0001|2"
  "fg-activity-K2|mode=fg perturb=activity tangents=2|2"
  "fgbp-mix-activity-sel2|mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=2|2"
  "untied-fg|mode=fg tie_embeddings=0 optimizer=sgd lr=0.0001|2"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name sets_text most <<<"$c"
  read -r -a sets <<<"$sets_text"
  for M in $(seq 1 "$most"); do run "$name-M$M" "$M" "${sets[@]}"; done
  for M in $(seq 2 "$most"); do same "$name: M=$M vs M=1" "$name-M1" "$name-M$M"; done
done

# Out of core: stages that stream their layers through two slots (the budget the refusal of a
# 1-byte budget names) train byte for byte as in memory (bp, fg with activity perturbation), on
# a shape whose weights, not activations, do not fit (4 blocks, n_embd 128, MLP 512, ctx 16,
# one sample).
# A short corpus: the run's final evaluation reads every layer once per batch of the validation
# split, so 40 KB of text keeps it to seconds.
head -c 40000 "$dir/kjv.txt" >"$dir/kjv-40k.txt"
# mem_runtime=0: the budgets here are the stage's own bytes, not the process's: the floor a
# measured runtime's refusal names has a 2 MiB margin, in which a small stage fits in memory
# (docs/out-of-core.md, "The runtime")
ooc=(n_layer=4 n_embd=128 intermediate_size=512 ctx=16 micro_batch=1 micro_batches=2 text_file="$dir/kjv-40k.txt"
     mem_runtime=0)
for c in "bp|mode=bp" "fg-activity|mode=fg perturb=activity tangents=2"; do
  IFS='|' read -r name sets_text <<<"$c"
  read -r -a sets <<<"$sets_text"
  sets+=("${ooc[@]}")
  mkdir -p "$dir/probe.w" "$dir/$name-ooc.w"
  run probe 2 "${sets[@]}" -- --mem-budget 1 --weights-dir "$dir/probe.w"
  budget=$(grep -o "at least [0-9]* bytes" "$dir/probe.log" | grep -o "[0-9]*" | sort -n | tail -n 1)
  run "$name-mem" 2 "${sets[@]}"
  run "$name-ooc" 2 "${sets[@]}" -- --mem-budget "${budget:-1}" --weights-dir "$dir/$name-ooc.w"
  streams=$(grep -c "streams its layers" "$dir/$name-ooc.log")
  [ "$streams" -eq 2 ] || echo "$streams of 2 stages streamed their layers" >>"$dir/$name-ooc.problem"
  [ -n "$budget" ] || echo "no budget from the probe: $(grep -m1 error "$dir/probe.log")" >>"$dir/$name-ooc.problem"
  same "$name: 2 stages streamed through two slots ($budget bytes) vs in memory" "$name-mem" "$name-ooc"
done

# The tied copies: embed_tokens is the first V x C floats of the flat parameters, lm_head the
# last; untied, they start different and stay so.
bytes=$((V * C * 4))
for name in bp-M3 fg-M2 fg-activity-K2-M2 untied-fg-M2; do
  want=equal; [ "${name#untied}" != "$name" ] && want=different
  if [ -f "$dir/$name.bin" ]; then
    got=different
    cmp -s <(head -c $bytes "$dir/$name.bin") <(tail -c $bytes "$dir/$name.bin") && got=equal
    verdict "$name: embed_tokens and lm_head $want after $steps steps" \
      "$([ $got = $want ] || echo "they are $got")"
  else
    verdict "$name: embed_tokens and lm_head $want" "no params file"
  fi
done

# The loss falls: 80 bp steps on one rank; eval and generate read the checkpoint.
run falls 1 mode=bp steps=80 lr=0.003 micro_batch=4 micro_batches=4 -- --summary-json "$dir/falls.json"
first=$(sed -n 2p "$dir/falls/loss.csv" | cut -d, -f2) last=$(tail -n 1 "$dir/falls/loss.csv" | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.5) }' &&
  verdict "bp: loss falls by more than 1.5 nats in 80 steps ($first -> $last)" "" ||
  verdict "bp: loss falls by more than 1.5 nats in 80 steps" "$first -> $last $(cat "$dir/falls.problem" 2>/dev/null)"
tail -c 40000 "$dir/kjv.txt" >"$dir/val.txt"  # the validation split: the last 10% of the bytes
"$fgpipe" eval --checkpoint "$dir/falls/checkpoint.h5" --text "$dir/val.txt" \
  --summary-json "$dir/eval.json" >"$dir/eval.log" 2>&1
verdict "eval: the checkpoint scores the validation bytes as the run did" "$(py_check "$dir/eval.json" "$dir/falls.json" <<'PY'
import json, sys
e, r = (json.load(open(p)) for p in sys.argv[1:3])
ok = abs(e["loss"] - r["val_loss"]) <= 1e-5 * r["val_loss"]
print("" if ok else f"eval {e['loss']}, run {r['val_loss']}")
PY
)"
"$fgpipe" generate --checkpoint "$dir/falls/checkpoint.h5" --prompt "And God" --tokens 30 --seed 3 \
  >"$dir/gen.txt" 2>"$dir/gen.err"
n=$(wc -c <"$dir/gen.txt")
[ "$n" -eq $((7 + 30 + 1)) ] && verdict "generate: prompt + 30 bytes" "" ||
  verdict "generate: prompt + 30 bytes" "$n bytes: $(tail -n 1 "$dir/gen.err")"

# Refused by name, exit 2: what llama has not got.
refused() {  # refused LABEL WANT KEY=VALUE...
  local label=$1 want=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  "$fgpipe" train --config "$config" "${base[@]}" "${sets[@]}" --no-checkpoint >/dev/null 2>"$dir/bad.err"
  local rc=$?
  [ $rc -eq 2 ] && grep -q "$want" "$dir/bad.err" && verdict "$label: refused by name, exit 2" "" ||
    verdict "$label: refused by name, exit 2" "exit $rc: $(cat "$dir/bad.err")"
}
refused "n_kv_head 3 of 4 heads" "n_kv_head 3 does not divide n_head 4" n_kv_head=3
refused "odd head_dim" "head_dim 11 is odd" head_dim=11
refused "local losses" "local_groups needs" mode=fg perturb=activity local_groups=2
finish
