#!/usr/bin/env bash
# precision = bf16 out of core (docs/out-of-core.md, "A frozen base in BF16"; issues 52 and 53):
# a streamed stage's GEMMs read BF16 weights made once per acquire, or, for a frozen base kept
# in BF16, the slot's BF16 values as read (never widened). Checks:
# - LoRA on the tiny Llama, its base stored BF16, in bf16: streamed at its floor equals in
#   memory bitwise (losses, parameters, the checkpoint) in bp on 1 stage and in fg+bp at lag 1
#   on 2 stages (the lagged ops read the base's BF16 slot too); the run says its base's slots
#   hold BF16, and the floor with BF16 slots is below the floor of the same base in an fp32 run
#   (whose slots widen it);
# - the GPT (tied head fused with the loss, biases, LayerNorms) fully fine-tuned in bf16:
#   streamed at its floor equals in memory bitwise in bp and in fg+bp at lag 1 on 2 stages.
# Skipped (77) on a CPU without avx512_bf16, where cli_errors checks the refusal.
#
# usage: bf16_out_of_core.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
if ! grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "bf16_out_of_core: SKIPPED: this CPU lacks avx512_bf16 (the refusal is cli_errors's)" >&2; exit 77
fi
convert=$(dirname "$config")/../../tools/fgpipe-convert
kjv_tokens 60000 50000
llama=(--config "$config" --set data=tokens --set train_tokens="$dir/train.bin"
       --set val_tokens="$dir/val.bin" --set n_embd=96 --set intermediate_size=256 --set ctx=16
       --set micro_batch=1 --set micro_batches=2 --set warmup_steps=0 --set eval_every=0
       --set print_every=1000000 --set mem_runtime=0)
lora=(lora_rank=2 lora_alpha=4 lora_targets=q,k,v,o,gate,up,down steps=5 precision=bf16)
# stream = 1: at this size a stage's streamed floor (a wave's activations and its slots) is more
# than it needs in memory.

run() {  # run NAME M BUDGET KEY=VALUE... [-- ARGS]: M stages (BUDGET -: in memory) of base[@]
  local name=$1 M=$2 budget=$3; shift 3
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  [ "$budget" != - ] && extra+=(--mem-budget "$budget" --weights-dir "$dir/$name.w" --set stream=1) &&
    mkdir -p "$dir/$name.w"
  local mpi=()
  [ "$M" -gt 1 ] && mpi=(mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
  timeout 120 "${mpi[@]}" "$fgpipe" train "${base[@]}" --set stages="$M" "${sets[@]}" "${extra[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
}

floor_budget() {  # floor_budget M KEY=VALUE... [-- ARGS]: the largest "at least N bytes" of a 1-byte budget
  run probe "$1" 1 "${@:2}"
  grep -oE "at least [0-9]* bytes" "$dir/probe.log" | grep -oE "[0-9]+" | sort -n | tail -n 1
}

compare() {  # compare NAME M KEY=VALUE... [-- ARGS]: in memory (NAME-mem) against the floor (NAME-ooc)
  local name=$1 M=$2; shift 2
  local budget why=""
  budget=$(floor_budget "$M" "$@")
  run "$name-mem" "$M" - "$@"; local rc_mem=$?
  run "$name-ooc" "$M" "${budget:-1}" "$@"; local rc_ooc=$?
  if [ -z "$budget" ]; then why="no budget from the probe: $(grep -m1 error "$dir/probe.log")"
  elif [ "$rc_mem" -ne 0 ] || [ "$rc_ooc" -ne 0 ]; then
    why="exit $rc_mem / $rc_ooc: $(grep -h -m1 error "$dir/$name-mem.log" "$dir/$name-ooc.log" | head -n 1)"
  elif [ "$(grep -c "streams its layers" "$dir/$name-ooc.log")" -lt "$M" ]; then why="not every stage streamed"
  else why=$(runs_differ "$name-mem" "$name-ooc")
  fi
  verdict "$name: streamed at its floor ($budget bytes) = in memory, bitwise" "$why"
}

# A base trained a few steps, its weights rounded to BF16 and stored as BF16 datasets.
base=("${llama[@]}")
run basemodel 1 - steps=4
cp "$dir/basemodel/checkpoint.h5" "$dir/b16.h5" 2>/dev/null
verdict "the base is stored in BF16" "$(py_check "$dir" "$(dirname "$convert")" <<'PY'
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[2])
import fgpipe_stream as stream
with h5py.File(f"{sys.argv[1]}/b16.h5", "r+") as f:
    keys = []
    f["params"].visititems(lambda n, o: keys.append(n) if isinstance(o, h5py.Dataset) else None)
    for k in keys:
        a = f["params"][k][()]
        r = (stream.bf16_bits(a).astype(np.uint32) << 16).view(np.float32)
        del f["params"][k]
        stream.write_dataset(f, f"params/{k}", a.shape, lambda r0, r1, r=r: r[r0:r1] if r.ndim else r, True)
PY
)"
from=(-- --init-from "$dir/b16.h5")

compare lora-bp 1 "${lora[@]}" mode=bp "${from[@]}"
n16=$(grep -oE "[0-9]+ of its layers' slots hold BF16" "$dir/lora-bp-ooc.log" | grep -oE "^[0-9]+")
verdict "lora-bp: the base's 8 projections (2 blocks: qkv, o, gate_up, down) stream in BF16 slots (the log: ${n16:-none})" \
  "$([ "${n16:-0}" -eq 8 ] || grep -m1 "streams its layers" "$dir/lora-bp-ooc.log")"
compare lora-fgbp 2 "${lora[@]}" mode=fg+bp perturb=weight estimator=mix shrink=0.5 select=1 lag=1 "${from[@]}"

# The floor with BF16 slots against the same base in fp32 (widened slots): slot_plan.c's sizes,
# which fgpipe plan --batches counts too.
f16=$(floor_budget 1 "${lora[@]}" mode=bp "${from[@]}")
f32=$(floor_budget 1 "${lora[@]}" mode=bp precision=fp32 "${from[@]}")
verdict "the floor with BF16 slots ($f16 bytes) is below the fp32 run's ($f32 bytes)" \
  "$([ -n "$f16" ] && [ -n "$f32" ] && [ "$f16" -lt "$f32" ] || echo "not below")"

# The GPT fully fine-tuned in bf16 (its config; the corpus of the docs).
docs_corpus
base=(--config "$(dirname "$config")/gpt-kjv.conf" --set text_file="$dir/corpus.txt" --set n_layer=2
      --set n_embd=64 --set n_head=4 --set ctx=32 --set micro_batch=2 --set micro_batches=2
      --set warmup_steps=0 --set eval_every=0 --set print_every=1000000 --set mem_runtime=0
      --set precision=bf16 --set steps=4)
compare gpt-bp 1 mode=bp
compare gpt-fgbp 2 mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=1 lag=1
finish
