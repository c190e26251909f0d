#!/usr/bin/env bash
# GPU end to end: the same 20 steps with device = cuda on 1 stage and on 2 stages (two ranks;
# with one GPU both share it and their messages go through host memory), and on the CPU.
# Checks: 2 stages on the GPU give byte-identical parameters to 1 stage on the GPU (every op
# and every reduction is the same whatever the cut); the GPU's per-step losses follow the CPU's
# within 1e-3 relative (FP32 GEMMs sum in another order). For bp, fg and fg+bp.
# Exit 77 (ctest: skipped) without a GPU or without the CUDA build.
# usage: gpu_pipeline.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_pipeline: SKIPPED: no NVIDIA GPU here (nvidia-smi -L fails)" >&2; exit 77
fi
base=(--set model=784-256-128-64-10 --set steps=20 --set warmup_steps=0 --set micro_batches=4
      --set print_every=1000000 --set optimizer=adam --set lr=0.001
      --set select=2)  # fg+bp: a fixed selection, not one fitted to measured (noisy) costs

run() {  # run NAME M DEVICE MODE: fails (with a FAIL line) when the run does
  timeout 300 mpirun -np "$2" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" --set stages="$2" --device "$3" \
    --set mode="$4" --out "$dir/$1" --save-params "$dir/$1.bin" >"$dir/$1.log" 2>&1
  local rc=$?
  if grep -q "built without CUDA" "$dir/$1.log"; then
    echo "gpu_pipeline: SKIPPED: this fgpipe was built without CUDA" >&2; exit 77
  fi
  if [ $rc -ne 0 ]; then verdict "$1" "exit $rc"; tail -5 "$dir/$1.log"; return 1; fi
}

for mode in bp fg fg+bp; do
  tag=${mode/+/_}
  run "$tag-gpu1" 1 cuda "$mode" && run "$tag-gpu2" 2 cuda "$mode" && run "$tag-cpu1" 1 cpu "$mode" || continue
  cmp -s "$dir/$tag-gpu1.bin" "$dir/$tag-gpu2.bin"
  verdict "$mode: 2 GPU stages give the parameters of 1, byte for byte" \
    "$([ $? -eq 0 ] || echo "2 GPU stages differ from 1")"
  worst=$(loss_diff "$dir/$tag-gpu1/loss.csv" "$dir/$tag-cpu1/loss.csv")
  verdict "$mode: GPU losses follow the CPU's (worst relative difference $worst over 20 steps)" \
    "$(awk -v w="$worst" 'BEGIN { exit !(w <= 1e-3) }' || echo "more than 1e-3")"
done
finish
