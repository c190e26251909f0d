#!/usr/bin/env bash
# LoRA on the GPU end to end (docs/gpt.md, "LoRA"): the tiny Llama of llama-tiny.conf trained
# 20 steps on the CPU as a base, then rank-2 adapters on every projection from --init-from for
# 20 steps with device = cuda: bp, fg and fg+bp (cv, lag 0). Checks:
# - 2 GPU stages give the losses and parameters of 1, byte for byte;
# - the GPU's per-step losses follow the CPU's within 2e-3 relative (gpu_gpt.sh's bound: FP32
#   GEMMs add in another order);
# - the base's tensors in the GPU run's checkpoint are the base checkpoint's, bit for bit;
# - streamed from flash on the GPU (mem_budget, stream = 1: the base read-only) equals the GPU
#   in memory, byte for byte.
# Exit 77 (ctest: skipped) without a GPU or without the CUDA build.
# usage: gpu_lora.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_lora: SKIPPED: no NVIDIA GPU here (nvidia-smi -L fails)" >&2; exit 77
fi
kjv_tokens 100000 90000
# mem_runtime=0: the budgets here are the stage's own bytes (exact floors and slot counts), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set warmup_steps=0 --set eval_every=0 --set print_every=1000000 --set micro_batch=2
      --set micro_batches=3 --set mem_runtime=0)
lora=(lora_rank=2 lora_alpha=4 lora_targets=q,k,v,o,gate,up,down)

run() {  # run NAME M DEVICE KEY=VALUE... [-- ARGS]: fails (with a FAIL line) when the run does
  local name=$1 M=$2 device=$3; shift 3
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  timeout 300 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" --device "$device" \
    "${sets[@]}" "${extra[@]}" --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
  local rc=$?
  if grep -q "built without CUDA" "$dir/$name.log"; then
    echo "gpu_lora: SKIPPED: this fgpipe was built without CUDA" >&2; exit 77
  fi
  if [ $rc -ne 0 ]; then verdict "$name" "exit $rc: $(grep -m1 error "$dir/$name.log")"; return 1; fi
}

run basemodel 1 cpu steps=20 || { finish; exit; }
from=(-- --init-from "$dir/basemodel/checkpoint.h5")
mkdir -p "$dir/weights"

cases=(
  "bp|mode=bp"
  "fg|mode=fg optimizer=sgd lr=0.001"
  "fgbp|mode=fg+bp estimator=cv select=1 lag=0 optimizer=sgd lr=0.001"
)
for c in "${cases[@]}"; do
  tag=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  run "$tag-gpu1" 1 cuda steps=20 "${lora[@]}" "${sets[@]}" "${from[@]}" &&
    run "$tag-gpu2" 2 cuda steps=20 "${lora[@]}" "${sets[@]}" "${from[@]}" &&
    run "$tag-cpu1" 1 cpu steps=20 "${lora[@]}" "${sets[@]}" "${from[@]}" &&
    run "$tag-gpu-ooc" 1 cuda steps=20 stream=1 "${lora[@]}" "${sets[@]}" "${from[@]}" \
      --mem-budget 1G --weights-dir "$dir/weights" || continue
  same_runs "$tag: LoRA on 2 GPU stages = 1, byte for byte" "$tag-gpu1" "$tag-gpu2"
  grep -q "streams its layers" "$dir/$tag-gpu-ooc.log" ||
    verdict "$tag: the streamed GPU run streams" "$(grep -m1 error "$dir/$tag-gpu-ooc.log")no \"streams its layers\" line"
  same_runs "$tag: LoRA streamed on the GPU (the base read-only) = in memory, byte for byte" "$tag-gpu1" "$tag-gpu-ooc"
  w=$(loss_diff "$dir/$tag-gpu1/loss.csv" "$dir/$tag-cpu1/loss.csv")
  verdict "$tag: GPU losses follow the CPU's over 20 steps (worst relative difference $w)" \
    "$(awk -v w="$w" 'BEGIN { exit !(w <= 2e-3) }' || echo "more than 2e-3")"
  verdict "$tag: the base's tensors are the base checkpoint's, bit for bit" "$(py_check "$dir/basemodel/checkpoint.h5" "$dir/$tag-gpu1/checkpoint.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["params"] for p in sys.argv[1:3])
names = []
b.visit(lambda n: names.append(n) if isinstance(b[n], h5py.Dataset) else None)
base = [n for n in names if ".lora_" not in n]
bad = [n for n in base if n not in a or not np.array_equal(a[n][...].view(np.uint32), b[n][...].view(np.uint32))]
print(f"{len(bad)} of {len(base)} base tensors changed: {bad[:3]}" if bad or not base else "")
PY
)"
done
finish
