#!/usr/bin/env bash
# The GPT out of core (docs/gpt.md, docs/out-of-core.md): a stage that streams its layers from a
# layer store through two slots trains byte for byte like the same stage in memory (losses,
# final parameters and the HDF5 checkpoint) in bp, bp with clipping, fg (weight and activity
# perturbation) and fg+bp on 1 and 2 stages, so the tied embedding's copies are summed as in
# memory; a fine-tune (--init-from, freeze) of a streaming GPT equals the in-memory fine-tune
# and keeps its frozen tensors. FGPIPE_TIER=rest: the cases the checks below read (bp, bp with
# clipping and fg on 1 stage, fg with activity on 2, bp and fg+bp on both) and the fine-tune;
# long: the other five (fg and bp with clipping on 2 stages, activity on 1, fg+bp with mix).
#
# usage: gpt_out_of_core.sh FGPIPE CONFIG   (CONFIG: the GPT config, launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
docs_corpus
C=64 V=256 T=16
# One sample per micro-batch and n_embd 64 (the weights grow as its square, the activations
# linearly): the weights, not the activations, are what does not fit, on 1 and on 2 stages.
# mem_runtime=0: the budgets here are the stage's own bytes (exact floors and slot counts), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
base=(--set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=$C --set n_head=2 --set ctx=$T
      --set micro_batch=1 --set micro_batches=2 --set steps=10 --set warmup_steps=0
      --set eval_every=0 --set print_every=1000000 --set mem_runtime=0)

run() {  # run NAME M BUDGET KEY=VALUE... [-- ARGS]: M stages (BUDGET -: in memory) into NAME/, NAME.bin
  local name=$1 M=$2 budget=$3; shift 3
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  [ "$budget" != - ] && extra+=(--mem-budget "$budget" --weights-dir "$dir/$name.w") && mkdir -p "$dir/$name.w"
  local mpi=()  # one stage: a singleton, quicker to start (and to fail) than under mpirun
  [ "$M" -gt 1 ] && mpi=(mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
  timeout 120 "${mpi[@]}" "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" "${extra[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
}

# The budgets a 1-byte budget's refusal names, the largest over the stages: "one" streams every
# stage at its floor (one slot of its largest layer where that is all that fits), "two" through
# two slots of it. Two slots are tried first: at one slot of the token table the final
# evaluation reads the table again for every batch (tests/gpt_tokens.sh checks that floor).
floor_budget() {  # floor_budget one|two M KEY=VALUE...
  local kind=$1 M=$2; shift 2
  [ -s "$dir/probe.log" ] && [ "$(cat "$dir/probe.key" 2>/dev/null)" = "$M $*" ] || {
    run probe "$M" 1 "$@"; echo "$M $*" >"$dir/probe.key"; }
  local figures
  if [ "$kind" = two ]; then
    figures=$(grep -oE "(at least [0-9]* bytes\)|[0-9]* bytes with two slots)" "$dir/probe.log")
  else
    figures=$(grep -oE "at least [0-9]* bytes" "$dir/probe.log")
  fi
  grep -oE "[0-9]+" <<<"$figures" | sort -n | tail -n 1
}

differ() {  # differ A B: what differs between runs A and B (step,loss,lr; params; checkpoint)
  cmp -s <(cut -d, -f1-3 "$dir/$1/loss.csv") <(cut -d, -f1-3 "$dir/$2/loss.csv") || echo "losses differ"
  cmp -s "$dir/$1.bin" "$dir/$2.bin" || echo "params differ ($(cmp -l "$dir/$1.bin" "$dir/$2.bin" | wc -l) bytes)"
  h5diff -q "$dir/$1/checkpoint.h5" "$dir/$2/checkpoint.h5" /params /params >/dev/null 2>&1 &&
    h5diff -q "$dir/$1/checkpoint.h5" "$dir/$2/checkpoint.h5" /optimizer /optimizer >/dev/null 2>&1 ||
    echo "checkpoints differ"
}

compare() {  # compare NAME M KEY=VALUE... [-- ARGS]: in memory (NAME-mem) against the floor (NAME-ooc)
  local name=$1 M=$2; shift 2
  local budget why=""
  budget=$(floor_budget two "$M" "$@")
  run "$name-mem" "$M" - "$@"; local rc_mem=$?
  run "$name-ooc" "$M" "${budget:-1}" "$@"; local rc_ooc=$?
  local streams
  streams=$(grep -c "streams its layers" "$dir/$name-ooc.log")
  # A small stage may fit in memory at its two-slot figure (a streamed stage keeps a wave of
  # lanes, in memory one micro-batch's): then every stage streams at the one-slot floor.
  if [ "$rc_ooc" -eq 0 ] && [ "$streams" -ne "$M" ]; then
    budget=$(floor_budget one "$M" "$@")
    run "$name-ooc" "$M" "${budget:-1}" "$@"; rc_ooc=$?
    streams=$(grep -c "streams its layers" "$dir/$name-ooc.log")
  fi
  if [ -z "$budget" ]; then why="no budget from the probe: $(grep -m1 error "$dir/probe.log")"
  elif [ "$rc_mem" -ne 0 ] || [ "$rc_ooc" -ne 0 ]; then
    why="exit $rc_mem / $rc_ooc: $(grep -h -m1 error "$dir/$name-mem.log" "$dir/$name-ooc.log" | head -n 1)"
  elif [ "$streams" -ne "$M" ]; then why="$streams of $M stages streamed their layers"
  elif ! grep -qE "through 2 slots|slots \([12] of" "$dir/$name-ooc.log"; then why="no stage ran at its floor (2 slots, or 1 large and small ones)"
  else why=$(differ "$name-mem" "$name-ooc" | tr '\n' ' '); fi
  verdict "$name ($*): out of core (at the floor, $budget bytes) equals in memory, bitwise" "$why"
}

# NAME|STAGES (rest)|STAGES (long)|KEY=VALUE...
cases=(
  "bp|1 2||mode=bp"
  "bp-clip|1|2|mode=bp clip_norm=0.05"
  "fg|1|2|mode=fg optimizer=sgd lr=0.0001"
  "fg-activity|2|1|mode=fg perturb=activity tangents=2"
  "fgbp-cv-lag1|1 2||mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001"
  "fgbp-mix-activity||1 2|mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=1"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name rest long sets <<<"$c"
  read -r -a sets <<<"$sets"
  for M in $(in_tier rest && echo "$rest") $(in_tier long && echo "$long"); do
    compare "$name-M$M" "$M" "${sets[@]}"
  done
done
in_tier rest || finish

# Each streamed stage says which bound its step is on, with the figures that decide it.
line=$(grep -h "out of core:" "$dir/bp-M2-ooc.log" | head -n 1)
pattern='stage [01] out of core: [0-9.]+ GB on flash, [0-9.]+ GB in memory .* a step read [0-9.]+ GB and wrote [0-9.]+ GB; compute [0-9.]+ s per step needs [0-9.]+ GB/s, the flash gave [0-9.]+ GB/s read .*: (flash|compute)-bound'
[ "$(grep -hcE "$pattern" "$dir/bp-M2-ooc.log")" -ge 1 ] && verdict "out of core: the bound line (flash, memory, needed and measured bandwidth)" "" ||
  verdict "out of core: the bound line (flash, memory, needed and measured bandwidth)" "got '${line:-nothing}'"

# The tied copies stay equal out of core: wte is the first V x C floats of the parameters,
# lm_head.weight the last.
bytes=$((V * C * 4))
for name in bp-M1-ooc fg-activity-M2-ooc fgbp-cv-lag1-M2-ooc; do
  cmp -s <(head -c $bytes "$dir/$name.bin") <(tail -c $bytes "$dir/$name.bin") &&
    verdict "$name: wte and lm_head.weight equal" "" ||
    verdict "$name: wte and lm_head.weight equal" "they differ (or no params: $(grep -m1 error "$dir/$name.log"))"
done

# bp keeps the tied copies once on a stage that holds both (its weights store has no lm_head:
# one copy on flash, read and written); with a step store (bp with clip_norm), in fg and fg+bp
# (their reference and kept gradient differ per copy) and on 2 stages each copy keeps its own.
heads() {  # heads NAME: the weights stores of NAME's run that list lm_head
  /usr/bin/python3 -c "
import glob, sys, h5py
print(sum(b'lm_head' in list(h5py.File(p, 'r')['index_name'][...]) for p in glob.glob(sys.argv[1] + '/stage-*.h5')))" "$dir/$1.w"
}
why=""
grep -q "the tied copies kept once" "$dir/bp-M1-ooc.log" && [ "$(heads bp-M1-ooc)" = 0 ] ||
  why="bp on 1 stage: $(grep -m1 -o 'streams its layers.*' "$dir/bp-M1-ooc.log"), $(heads bp-M1-ooc) stores with lm_head"
for name in bp-clip-M1-ooc fg-M1-ooc fgbp-cv-lag1-M1-ooc bp-M2-ooc; do
  ! grep -q "the tied copies kept once" "$dir/$name.log" && [ "$(heads "$name")" = 1 ] ||
    why="$why; $name keeps them once ($(heads "$name") stores with lm_head)"
done
verdict "bp keeps a stage's tied copies once (no lm_head in its store); clip_norm, fg, fg+bp and 2 stages keep both" "$why"

# A fine-tune of a streaming GPT: --init-from a trained checkpoint (another seed, fresh
# optimizer state) with the embedding frozen equals the in-memory fine-tune, and wte, wpe (the
# first (V + T) x C floats) and the tied head (the last V x C) stay bit for bit.
tune=(mode=fg perturb=activity seed=9 freeze=embedding -- --init-from "$dir/bp-M1-mem/checkpoint.h5")
compare finetune 2 "${tune[@]}"
emb=$(((V + T) * C * 4))
if cmp -s <(head -c $emb "$dir/bp-M1-mem.bin") <(head -c $emb "$dir/finetune-ooc.bin") &&
   cmp -s <(tail -c $bytes "$dir/bp-M1-mem.bin") <(tail -c $bytes "$dir/finetune-ooc.bin") &&
   ! cmp -s "$dir/bp-M1-mem.bin" "$dir/finetune-ooc.bin" && grep -q "weights from" "$dir/finetune-ooc.log"; then
  verdict "finetune out of core: frozen copies unchanged, the rest trained" ""
else
  verdict "finetune out of core: frozen copies unchanged, the rest trained" "$(grep -m1 -E 'error|weights from' "$dir/finetune-ooc.log")"
fi

finish
