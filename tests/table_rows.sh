#!/usr/bin/env bash
# The budget decides the token table's layout (docs/out-of-core.md, "Row blocks of the token
# table"): a streamed stage whose table does not fit mem_budget whole takes it in row blocks by
# itself, says so in one line (fgpipe plan says the same), and trains bitwise as the run with
# table_block_rows set by hand to those rows and as that run in memory (loss.csv's step, loss
# and lr, the final parameters): the GPT in bp-zb, fg (weight tangents) and fg+bp (cv, lag 1),
# the Llama tied and untied, and LoRA on the Llama (the table frozen; its blocks without the
# wave's ids skipped, the same bits as the table whole). A budget too small
# either way is refused (exit 2) naming the smallest that works with row blocks and the one
# without; where the options forbid row blocks, naming the option.
#
# usage: table_rows.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
llama=$root/launch/configs/llama-tiny.conf
# Bytes of the KJV as tokens of a 1024-row table: the table (1040 rows with the GPT's
# positions) dwarfs the blocks at n_embd 64. 2000 validation tokens keep the final evaluation,
# which reads the store once per group of windows, to a second.
kjv_tokens 22000 20000
# mem_runtime=0: the budgets are the stage's own bytes (exact floors), not the process's.
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set vocab=1024 --set n_layer=2 --set n_embd=64 --set n_head=2 --set ctx=16
      --set micro_batch=2 --set micro_batches=2 --set steps=4 --set warmup_steps=0
      --set eval_every=0 --set print_every=1000000 --set mem_runtime=0 --set head_block=128
      --no-checkpoint)
llama_shape=(--set intermediate_size=128)

run() {  # run NAME CONFIG BUDGET KEY=VALUE...: one stage (BUDGET -: in memory) into NAME/, NAME.bin
  local name=$1 cfg=$2 budget=$3; shift 3
  local sets=() extra=()
  for kv in "$@"; do sets+=(--set "$kv"); done
  [ "$cfg" = "$llama" ] && extra+=("${llama_shape[@]}")
  [ "$budget" != - ] && rm -rf "$dir/$name.w" && mkdir -p "$dir/$name.w" &&
    extra+=(--mem-budget "$budget" --weights-dir "$dir/$name.w")
  timeout 120 "$fgpipe" train --config "$cfg" "${base[@]}" "${extra[@]}" "${sets[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
}
figures() {  # figures NAME: the "at least N bytes" a refusal names, in its order
  grep -oE "at least [0-9]+ bytes" "$dir/$1.log" | grep -oE "[0-9]+"
}
same() {  # same A B: what differs between runs A and B (step, loss, lr; the parameters)
  cmp -s <(cut -d, -f1-3 "$dir/$1/loss.csv") <(cut -d, -f1-3 "$dir/$2/loss.csv") || echo "losses differ"
  cmp -s "$dir/$1.bin" "$dir/$2.bin" || echo "params differ"
}

# chosen LABEL CONFIG KEY=VALUE...: the refusal of a 1-byte budget names the floor whole and in
# row blocks; halfway between them the run chooses its blocks, says so, and ends as the run
# with table_block_rows set to them, streamed and in memory, bitwise. Leaves budget, line and
# in_blocks (the smallest budget named) for the checks after it.
chosen() {
  local label=$1 cfg=$2 why="" whole rows rc; shift 2
  run probe "$cfg" 1 "$@"
  rc=$?
  whole=$(figures probe | head -n 1) in_blocks=$(figures probe | tail -n 1)
  [ $rc -eq 2 ] && grep -q "with the token table in row blocks (chosen by the budget), at least" "$dir/probe.log" ||
    why="rc $rc, the refusal names no row blocks: $(grep -m1 error "$dir/probe.log")"
  [ -n "$whole" ] && [ -n "$in_blocks" ] && [ "$in_blocks" -lt "$whole" ] || why="$why floors ${in_blocks:-?} in blocks, ${whole:-?} whole"
  budget=$(( (${whole:-2} + ${in_blocks:-0}) / 2 ))
  run auto "$cfg" "$budget" "$@"
  line=$(grep -m1 "the token table streams in row blocks of" "$dir/auto.log")
  rows=$(grep -oE "row blocks of [0-9]+ rows" <<<"$line" | grep -oE "[0-9]+")
  [ -n "$rows" ] && grep -q "streams its layers" "$dir/auto.log" || why="$why no blocks chosen: $(grep -m1 -E "error|streams" "$dir/auto.log")"
  run hand "$cfg" "$budget" "$@" table_block_rows="${rows:-0}"
  run mem "$cfg" - "$@" table_block_rows="${rows:-0}"
  grep -q "the token table streams in row blocks" "$dir/hand.log" && why="$why the hand-set run says it chose"
  why="$why$(same auto hand)$(same auto mem)"
  verdict "$label: refused at 1 byte naming ${in_blocks:-?} bytes in row blocks and ${whole:-?} whole; at $budget bytes, row blocks of ${rows:-?} rows chosen = table_block_rows=${rows:-?} streamed = in memory, bitwise" "$why"
}

chosen "gpt bp-zb" "$config" mode=bp schedule=zb
# fgpipe plan chooses as the run does (mem_runtime set: the same runtime).
plan_line=$("$fgpipe" plan --config "$config" "${base[@]::${#base[@]}-1}" --set mode=bp --set schedule=zb \
  --mem-budget "$budget" --weights-dir "$dir" 2>&1 | grep "the token table streams in row blocks")
verdict "fgpipe plan says the run's choice: ${plan_line:-nothing}" "$([ -n "$line" ] && [ "$plan_line" = "$line" ] || echo "the run said: ${line:-nothing}")"
# At the smallest budget the refusal named: the smallest blocks, and it trains.
run floor "$config" "$in_blocks" mode=bp schedule=zb
rc=$?
verdict "gpt bp-zb at the named floor ($in_blocks bytes): streams in row blocks of 128 rows" \
  "$([ $rc -eq 0 ] && grep -q "row blocks of 128 rows (9 blocks)" "$dir/floor.log" || echo "rc $rc: $(grep -m1 -E "error|row blocks" "$dir/floor.log")")"
chosen "gpt fg (weight tangents)" "$config" mode=fg optimizer=sgd lr=0.0001
chosen "gpt fg+bp (cv, lag 1)" "$config" mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001
chosen "llama bp-zb, tied" "$llama" mode=bp schedule=zb
chosen "llama fg, untied" "$llama" mode=fg optimizer=sgd lr=0.0001 tie_embeddings=0
lora=(mode=bp schedule=zb tie_embeddings=0 lora_rank=2 lora_alpha=4 lora_targets=q,k,v,o,gate,up,down)
chosen "llama LoRA bp-zb, untied: the tables frozen" "$llama" "${lora[@]}"
# A frozen table's blocks that hold none of a wave's ids (the KJV's bytes: rows below 256) are
# not read at all, and B stops above it (no layer below trains): the same bits as the table
# whole.
run whole "$llama" - "${lora[@]}"
verdict "llama LoRA: the frozen table in row blocks, its unread blocks skipped = the table whole, bitwise" "$(same mem whole)"

# Options that forbid row blocks: the refusal says what they would take and which option.
run forbidden "$config" 1 mode=fg perturb=activity
rc=$?
verdict "fg with perturb = activity: refused (exit 2) naming row blocks' floor and the option" \
  "$([ $rc -eq 2 ] && grep -qE "mem_budget 1 bytes is too small .*; the token table in row blocks would take at least [0-9]+ bytes, but perturb = activity forbids them" "$dir/forbidden.log" || echo "rc $rc: $(grep -m1 error "$dir/forbidden.log")")"
finish
