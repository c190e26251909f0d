#!/usr/bin/env bash
# GPU benchmark of the GPT (docs/gpu.md): for each model (the default GPT, 4 x 128, ctx 128;
# and a GPT-2-124M shape: 12 layers, 768 wide, 12 heads, ctx 1024, byte vocab), each mode
# (bp, fg, fg+bp) and each precision (fp32, tf32, bf16), one stage on GPU 0:
# - tokens/s of the steady state: two runs of S and 2S steps, tokens of the S extra steps over
#   their extra train_seconds (start-up, first-step allocations and cuBLAS set-up cancel out);
# - MFU: (6 N + 12 L C T) x tokens/s over the GPU's peak for the precision, N the parameters
#   (the tied embedding once), 12 L C T the attention FLOPs per token (PaLM's convention, the
#   causal mask not discounted); the same model FLOPs in every mode, so modes compare as
#   tokens/s do. The peaks assumed are printed (H100 SXM dense: fp32 67, tf32 495, bf16 989
#   TFLOP/s; override with PEAK_FP32, PEAK_TF32, PEAK_BF16);
# - peak GPU memory of the run (nvidia-smi, sampled every 50 ms, less the memory in use
#   before it; the CUDA context included), and fg's saving against bp's peak (bp stashes every
#   layer's input for its backward; fg with weight perturbation keeps none).
# fg is weight perturbation, K = 1; fg+bp on one stage backpropagates `select` = 1 of the
# micro-batches (no bubbles on one stage: the B ops add to the step).
# A third model, llama1b (MODELS="llama1b"), is Llama-3.2-1B's shape (launch/configs/
# llama-3.2-1b.conf: vocab 128256, tied, ctx 1024, 2 x 2 sequences) on random token ids, bp
# only (issue 52's target: 35% MFU in bf16).
# usage: bench/bench_gpu_gpt.sh [S]   (default 10 steps; MODELS="default gpt2" PRECISIONS=...)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
S=${1:-10}
fgpipe=build/fgpipe config=launch/configs/gpt-kjv.conf
[ -x "$fgpipe" ] || { echo "bench_gpu_gpt: build first (launch/build.sh)" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "bench_gpu_gpt: no GPU visible (nvidia-smi -L)" >&2; exit 2; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat docs/*.md README.md >"$dir/corpus.txt"  # any text: the benchmark measures speed
declare -A PEAK=([fp32]=${PEAK_FP32:-67} [tf32]=${PEAK_TF32:-495} [bf16]=${PEAK_BF16:-989})
declare -A SHAPE=([default]="4 128 4 128 4 4" [gpt2]="12 768 12 1024 4 2")  # L C H T B N
declare -A MODE=([bp]="mode=bp schedule=gpipe" [fg]="mode=fg perturb=weight"
                 [fg+bp]="mode=fg+bp perturb=weight estimator=cv select=1")

declare -A SHAPE_L=([llama1b]="16 2048 32 1024 2 2")
declare -A CONF=([default]=$config [gpt2]=$config [llama1b]=launch/configs/llama-3.2-1b.conf)
declare -A DATA=([default]="text_file=$dir/corpus.txt" [gpt2]="text_file=$dir/corpus.txt"
                 [llama1b]="train_tokens=$dir/llama-train.bin val_tokens=$dir/llama-val.bin")
declare -A MODES=([default]="bp fg fg+bp" [gpt2]="bp fg fg+bp" [llama1b]="bp")
/usr/bin/python3 -c "
import numpy as np, sys
r = np.random.default_rng(1)
for name, n in (('train', 1 << 20), ('val', 1025)):  # uint32 ids after the FGTOKU32 header
    open(f'{sys.argv[1]}/llama-{name}.bin', 'wb').write(b'FGTOKU32' + r.integers(0, 128256, n).astype('<u4').tobytes())" "$dir"

train() {  # train OUT MODEL STEPS SETS...: one run; its summary in OUT.json, peak GPU MiB in OUT.mem
  local out=$1 model=$2 steps=$3; shift 3
  local data=(); for kv in ${DATA[$model]}; do data+=(--set "$kv"); done
  local args=(); for kv in "$@"; do args+=(--set "$kv"); done
  local base; base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 50 >"$out.smi" &
  local smi=$!
  mpi_flags 1
  mpirun "${MPI_FLAGS[@]}" "$fgpipe" train --config "${CONF[$model]}" "${data[@]}" \
    "${args[@]}" --device cuda --set steps="$steps" --set warmup_steps=0 --set eval_every=0 \
    --set print_every=1000000 --no-checkpoint --out "$out" --summary-json "$out.json" >"$out.txt" 2>&1
  local rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null || true
  sort -n "$out.smi" | tail -n 1 | awk -v b="$base" '{ print $1 - b }' >"$out.mem"
  return $rc
}

echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)"
echo "peak TFLOP/s assumed: fp32 ${PEAK[fp32]}, tf32 ${PEAK[tf32]}, bf16 ${PEAK[bf16]}"
printf '| %-7s | %-5s | %-4s | %-10s | %-6s | %-13s | %-15s |\n' model mode prec tokens/s MFU "peak GPU MiB" "fg saves (MiB)"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' --------- ------- ------ ------------ -------- --------------- -----------------
for model in ${MODELS:-default gpt2}; do
  if [ "$model" = llama1b ]; then  # the published shape: q, o 2048 x 2048, k, v 2048 x 512, MLP 3 x 2048 x 8192
    read -r L C H T B N <<<"${SHAPE_L[$model]}"
    params=$(( 128256 * C + L * (2 * C * C + 2 * C * 512 + 3 * C * 8192 + 2 * C) + C ))
    shape=(ctx=$T micro_batch=$B micro_batches=$N)
  else
    read -r L C H T B N <<<"${SHAPE[$model]}"
    params=$(( 256 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C ))
    shape=(model=gpt n_layer=$L n_embd=$C n_head=$H ctx=$T micro_batch=$B micro_batches=$N)
  fi
  for precision in ${PRECISIONS:-fp32 tf32 bf16}; do
    declare -A mem=()
    for mode in ${MODES[$model]}; do
      sets=("${shape[@]}" precision="$precision" ${MODE[$mode]})
      r=$dir/$model-$mode-$precision
      if ! train "$r-a" "$model" "$S" "${sets[@]}" || ! train "$r-b" "$model" $((2 * S)) "${sets[@]}"; then
        printf '| %-7s | %-5s | %-4s | failed: %s |\n' "$model" "$mode" "$precision" \
          "$(grep -m1 -h error "$r-a.txt" "$r-b.txt" 2>/dev/null || echo "see $r-*.txt")"
        continue
      fi
      mem[$mode]=$(cat "$r-b.mem")
      saved=-; [ "$mode" != bp ] && [ -n "${mem[bp]:-}" ] && saved=$(( mem[bp] - mem[$mode] ))
      /usr/bin/python3 - "$r-a.json" "$r-b.json" "$S" $((B * N * T)) "$params" "$L" "$C" "$T" \
        "${PEAK[$precision]}" "$model" "$mode" "$precision" "${mem[$mode]}" "$saved" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
S, tokens_per_step, N, L, C, T = map(int, sys.argv[3:9])
peak = float(sys.argv[9]) * 1e12
model, mode, prec, mem, saved = sys.argv[10:15]
tps = S * tokens_per_step / (b["train_seconds"] - a["train_seconds"])
mfu = (6 * N + 12 * L * C * T) * tps / peak
print(f"| {model:<7} | {mode:<5} | {prec:<4} | {tps:<10.0f} | {100 * mfu:<5.1f}% | {mem:<13} | {saved:<15} |")
PY
    done
  done
done
echo "MFU counts 6 N + 12 L C T FLOPs per token (N: parameters) in every mode; fg is weight"
echo "perturbation (K = 1), fg+bp backpropagates 1 micro-batch of N per step on this one stage."
