#!/usr/bin/env bash
# The GPT on the GPU end to end (docs/gpu.md): a small GPT (2 blocks, n_embd 64, 4 heads, ctx
# 32) on a corpus made here (this repository's docs) for 50 steps with device = cuda on 1 and
# on 2 stages (two ranks sharing one GPU: their messages go through host memory), and on the
# CPU. Checks, for bp, fg (weight and activity perturbation) and fg+bp:
# - 2 GPU stages give the losses and parameters of 1, byte for byte (the cut changes no
#   operation; the tied embedding's copies are summed across the end stages);
# - the GPU's per-step losses follow the CPU's within 2e-3 relative over the 50 steps (FP32:
#   GEMMs and row sums add in another order; Adam and 50 steps amplify the last bits a little).
# Then precision = tf32 and bf16 (bp): the losses stay within 2% of the fp32 GPU run's, and 2
# stages give the parameters of 1 byte for byte (attention on tensor cores included). In bf16
# the activations, the JVP's tangents, the adjoints and the messages between stages are BF16
# and the GEMMs read the weights' BF16 copy (docs/gpu.md, "precision"): also fg (weight
# perturbation: BF16 tangents cross the cut) and fg+bp (activity) give on 2 stages the losses
# and parameters of 1, byte for byte, within 2% of fp32's losses; and a NaN planted in a weight
# of stage 2 of 2 stops the run at step 0 naming the layer its NaN entered (counted on the
# device), with no checkpoint written.
# Exit 77 (ctest: skipped) without a GPU or without the CUDA build.
# usage: gpu_gpt.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_gpt: SKIPPED: no NVIDIA GPU here (nvidia-smi -L fails)" >&2; exit 77
fi
docs_corpus
base=(--set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=64 --set n_head=4
      --set ctx=32 --set micro_batch=4 --set micro_batches=4 --set steps=50 --set warmup_steps=0
      --set eval_every=0 --set print_every=1000000 --set select=2)

run() {  # run NAME M DEVICE KEY=VALUE...: fails (with a FAIL line) when the run does
  local name=$1 M=$2 device=$3; shift 3
  local sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 300 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" --device "$device" \
    "${sets[@]}" --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
  local rc=$?
  if grep -q "built without CUDA" "$dir/$name.log"; then
    echo "gpu_gpt: SKIPPED: this fgpipe was built without CUDA" >&2; exit 77
  fi
  if [ $rc -ne 0 ]; then verdict "$name" "exit $rc"; tail -5 "$dir/$name.log"; return 1; fi
}

worst() { loss_diff "$dir/$1/loss.csv" "$dir/$2/loss.csv"; }  # worst RUN_A RUN_B

within() {  # within LABEL VALUE TOLERANCE
  verdict "$1 (worst relative difference $2)" "$(awk -v w="$2" -v t="$3" 'BEGIN { exit !(w <= t) }' || echo "more than $3")"
}

cases=(
  "bp|mode=bp"
  "fg|mode=fg optimizer=sgd lr=0.0001"
  "fg-activity|mode=fg perturb=activity tangents=2"
  "fgbp|mode=fg+bp perturb=activity estimator=mix shrink=0.5"
)
for c in "${cases[@]}"; do
  tag=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  run "$tag-gpu1" 1 cuda "${sets[@]}" && run "$tag-gpu2" 2 cuda "${sets[@]}" &&
    run "$tag-cpu1" 1 cpu "${sets[@]}" || continue
  cmp -s "$dir/$tag-gpu1.bin" "$dir/$tag-gpu2.bin" &&
    cmp -s <(cut -d, -f1-3 "$dir/$tag-gpu1/loss.csv") <(cut -d, -f1-3 "$dir/$tag-gpu2/loss.csv")
  verdict "$tag: 2 GPU stages give the losses and parameters of 1, byte for byte" \
    "$([ $? -eq 0 ] || echo "2 GPU stages differ from 1")"
  within "$tag: GPU losses follow the CPU's over 50 steps" "$(worst "$tag-gpu1" "$tag-cpu1")" 2e-3
done

# Tensor-core precisions against FP32 on the GPU: the same 50 bp steps, on 1 and 2 stages.
for precision in tf32 bf16; do
  run "bp-$precision" 1 cuda mode=bp precision=$precision &&
    run "bp-$precision-2" 2 cuda mode=bp precision=$precision || continue
  within "bp precision = $precision: losses within 2% of fp32's" "$(worst "bp-$precision" bp-gpu1)" 0.02
  cmp -s "$dir/bp-$precision.bin" "$dir/bp-$precision-2.bin"
  verdict "bp precision = $precision: 2 GPU stages give the parameters of 1, byte for byte" \
    "$([ $? -eq 0 ] || echo "2 GPU stages differ from 1")"
done

for c in "fg|mode=fg optimizer=sgd lr=0.0001" "fgbp|mode=fg+bp perturb=activity estimator=mix shrink=0.5"; do
  tag=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  run "$tag-bf16" 1 cuda "${sets[@]}" precision=bf16 && run "$tag-bf16-2" 2 cuda "${sets[@]}" precision=bf16 ||
    continue
  cmp -s "$dir/$tag-bf16.bin" "$dir/$tag-bf16-2.bin" &&
    cmp -s <(cut -d, -f1-3 "$dir/$tag-bf16/loss.csv") <(cut -d, -f1-3 "$dir/$tag-bf16-2/loss.csv")
  verdict "$tag precision = bf16: 2 GPU stages give the losses and parameters of 1, byte for byte" \
    "$([ $? -eq 0 ] || echo "2 GPU stages differ from 1")"
  [ -f "$dir/$tag-gpu1/loss.csv" ] &&
    within "$tag precision = bf16: losses within 2% of fp32's" "$(worst "$tag-bf16" "$tag-gpu1")" 0.02
done

# The NaN planted in block 1's MLP weight shows first at the input of the GELU after it.
if [ -f "$dir/bp-bf16/checkpoint.h5" ]; then
  cp "$dir/bp-bf16/checkpoint.h5" "$dir/nan.h5"
  why=$(/usr/bin/python3 -c 'import h5py, sys; h5py.File(sys.argv[1], "r+")["params/h.1.mlp.c_fc/weight"][0, 0] = float("nan")' \
    "$dir/nan.h5" 2>&1 | tail -n 1)
  timeout 300 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" --set stages=2 --device cuda --set mode=bp --set precision=bf16 \
    --init-from "$dir/nan.h5" --out "$dir/bf16-nan" >"$dir/bf16-nan.log" 2>&1
  rc=$?
  [ -n "$why" ] ||
    grep -q "loss is nan at step 0: .*the first values not finite were the input of layer [0-9]* (h.1.mlp.gelu)" \
      "$dir/bf16-nan.log" || why="error: $(grep -m1 error "$dir/bf16-nan.log")"
  [ $rc -ne 0 ] || why="$why; the run did not fail"
  [ ! -f "$dir/bf16-nan/checkpoint.h5" ] || why="$why; a checkpoint was written"
  verdict "bf16 on the GPU: a non-finite loss names the step and the layer its NaN entered (h.1.mlp.gelu)" "$why"
fi
finish
