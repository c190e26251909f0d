#!/usr/bin/env bash
# Out-of-core stages on the GPU (device = cuda with mem_budget): each layer's slot is copied to
# the device for its compute and back when written. Checks, on one stage, that streaming gives
# the in-memory GPU run's losses and weights byte for byte, for every mode and the options that
# change what a step streams (lag 1, guided, clipping in fg and bp), and in bf16 (the layers'
# BF16 copies made from the lanes in device memory, slot_bf16.c).
# Exit 77 (ctest: skipped) without a GPU or without the CUDA build.
# usage: gpu_out_of_core.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_out_of_core: SKIPPED: no NVIDIA GPU here (nvidia-smi -L fails)" >&2; exit 77
fi
# mem_runtime=0: the budgets here are the stage's own bytes (exact floors and slot counts), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
base=(--set model=784-512-512-512-512-512-512-512-512-10 --set warmup_steps=0 --set steps=12
      --set print_every=1 --set optimizer=sgd --set lr=0.0001 --device cuda --set mem_runtime=0)
# The budgets stream the stage through two or more slots (its layers in memory need more).
cases=("fg|18M|mode=fg"
       "fgbp|24M|mode=fg+bp estimator=cv lag=0 select=2"
       "fgbp-lag1|30M|mode=fg+bp estimator=cv lag=1 select=2"
       "guided|32M|mode=fg+bp estimator=guided tangents=2 select=2"
       "fg-clip|18M|mode=fg clip_norm=0.05"
       "bp|24M|mode=bp"
       "bp-clip|26M|mode=bp clip_norm=0.05"
       "bf16-bp|24M|mode=bp precision=bf16"
       "bf16-fgbp-lag1|30M|mode=fg+bp estimator=cv lag=1 select=2 precision=bf16")
for c in "${cases[@]}"; do
  IFS='|' read -r name budget sets <<<"$c"
  s=(); for kv in $sets; do s+=(--set "$kv"); done
  for where in mem ooc; do
    extra=(); [ $where = ooc ] && extra=(--mem-budget "$budget" --weights-dir "$dir/$name.w")
    timeout 300 "$fgpipe" train --config "$config" "${base[@]}" "${s[@]}" --out "$dir/$name-$where" \
      --save-params "$dir/$name-$where.bin" "${extra[@]}" >"$dir/$name-$where.log" 2>&1
    rc=$?
    if grep -q "built without CUDA" "$dir/$name-$where.log"; then
      echo "gpu_out_of_core: SKIPPED: this fgpipe was built without CUDA" >&2; exit 77
    fi
    [ $rc -ne 0 ] && tail -3 "$dir/$name-$where.log"
  done
  why=""
  if ! grep -q "streams its layers" "$dir/$name-ooc.log"; then why="did not stream"
  elif ! cmp -s <(cut -d, -f1-3 "$dir/$name-mem/loss.csv") <(cut -d, -f1-3 "$dir/$name-ooc/loss.csv"); then why="losses differ"
  elif ! cmp -s "$dir/$name-mem.bin" "$dir/$name-ooc.bin"; then why="weights differ"; fi
  verdict "$name on the GPU: out of core ($budget) equals in memory, bitwise (losses, weights)" "$why"
done
finish
