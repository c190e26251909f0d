#!/usr/bin/env bash
# A GPU stage streaming its layers from flash against its bound (issue 53 item 5, docs/gpu.md):
# for bp (a byte-vocabulary GPT of 24 blocks of 1024, AdamW: 3.6 GB of weights and optimizer
# state; 2 sequences of 128 a step) and LoRA (Llama-3.2-1B's blocks over a byte vocabulary,
# rank 16 on every projection: a 3.9 GB frozen base; one sequence of 32), one stage on GPU 0,
# TF32, each run twice: in GPU memory, and streamed with a --mem-budget of a quarter of the
# model (stream = 1; the budget holds the activations too, hence the short sequences). Printed per run: step seconds;
# for the streamed one the bytes a step reads and writes on flash and the flash's bandwidth
# (the run's own "out of core" line), the bytes copied to and from the GPU (its "device
# copies" line) and the link's bandwidth (fgpipe-bench-cuda link), and
#   bound = max(compute: the in-memory step, flash: the step's I/O seconds, PCIe: the step's
#               copies over the page-locked link's bandwidth),
# and bound / streamed step (1.0: the stream costs nothing beyond the slowest of the three).
# OLD=path/to/another/fgpipe adds that binary's streamed rows (an A/B in one call).
# usage: bench/bench_gpu_stream.sh [STEPS]   (default 6; DIR: the flash directory, default
#        /var/tmp/fgpipe-gpu-stream; about 9 GB free needed; CASES="bp lora"; KEEP=1 keeps it)
set -uo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
fgpipe=${FGPIPE:-build/fgpipe} bench_cuda=${BENCH_CUDA:-build/fgpipe-bench-cuda}
dir=${DIR:-/var/tmp/fgpipe-gpu-stream}
[ -x "$fgpipe" ] || { echo "bench_gpu_stream: build first (launch/build.sh)" >&2; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "bench_gpu_stream: no GPU visible (nvidia-smi -L)" >&2; exit 2; }
rm -rf "$dir" && mkdir -p "$dir"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$dir"' EXIT  # KEEP=1 keeps the runs' logs
# Random tokens: the speed does not depend on them; a validation split of one window keeps the
# end-of-run evaluation (which streams the model once per window) out of the way.
/usr/bin/python3 -c "
import numpy as np, sys
r = np.random.default_rng(1)
r.integers(0, 256, 400000).astype(np.uint16).tofile(sys.argv[1] + '/train.bin')
for ctx in (32, 128): r.integers(0, 256, ctx + 1).astype(np.uint16).tofile(f'{sys.argv[1]}/val-{ctx}.bin')" "$dir"
"$bench_cuda" link | tee "$dir/link.txt"
up=$(awk -F'|' '/page-locked/ {print $3 + 0}' "$dir/link.txt")
down=$(awk -F'|' '/page-locked/ {print $4 + 0}' "$dir/link.txt")

common=(--set data=tokens --set train_tokens="$dir/train.bin"
        --set steps="$steps" --set warmup_steps=0 --set eval_every=0 --set print_every=1000000
        --set precision=tf32 --set mem_runtime=0 --device cuda --no-checkpoint)
declare -A CONFIG=([bp]=launch/configs/gpt-kjv.conf [lora]=launch/configs/llama-3.2-1b.conf)
declare -A SETS=(
  [bp]="val_tokens=$dir/val-128.bin n_layer=24 n_embd=1024 n_head=16 ctx=128 micro_batch=1 micro_batches=2 mode=bp schedule=gpipe optimizer=adam"
  [lora]="val_tokens=$dir/val-32.bin vocab=256 ctx=32 micro_batch=1 micro_batches=1 mode=bp lora_rank=16 lora_alpha=32 lora_targets=q,k,v,o,gate,up,down")
declare -A BUDGET=([bp]=900M [lora]=950M)

run() {  # run NAME BINARY CASE [ARGS...]: one run, its log in NAME.log and summary in NAME.json
  local name=$1 bin=$2 case=$3; shift 3
  local s=(); for kv in ${SETS[$case]}; do s+=(--set "$kv"); done
  timeout 300 "$bin" train --config "${CONFIG[$case]}" "${common[@]}" "${s[@]}" "$@" \
    --summary-json "$dir/$name.json" >"$dir/$name.log" 2>&1 ||
    { echo "bench_gpu_stream: $name FAILED: $(grep -m1 -i error "$dir/$name.log")" >&2; return 1; }
}

printf '| case | binary | mem_budget | step s | flash GB read + written / step | flash s | PCIe GB / step | PCIe s | compute s | bound s | bound / step |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for case in ${CASES:-bp lora}; do
  run "$case-mem" "$fgpipe" "$case" || continue
  bins=("new|$fgpipe"); [ -n "${OLD:-}" ] && bins+=("old|$OLD")
  for b in "${bins[@]}"; do
    IFS='|' read -r tag bin <<<"$b"
    rm -rf "$dir/w" && mkdir -p "$dir/w"
    run "$case-$tag" "$bin" "$case" --set stream=1 --mem-budget "${BUDGET[$case]}" --weights-dir "$dir/w" || continue
    /usr/bin/python3 - "$dir" "$case" "$tag" "${BUDGET[$case]}" "$steps" "$up" "$down" <<'PY'
import json, re, sys
d, case, tag, budget, steps, up, down = sys.argv[1:8]
mem = json.load(open(f"{d}/{case}-mem.json"))
log = open(f"{d}/{case}-{tag}.log").read()
ooc = json.load(open(f"{d}/{case}-{tag}.json"))
m = re.search(r"a step read ([0-9.]+) GB and wrote ([0-9.]+) GB.*?\(I/O ([0-9.]+) s per step\)", log)
rb, wb, io = (float(x) for x in m.groups())
# the device copies come from the new binary's line (the old one moves the same bytes)
new = open(f"{d}/{case}-new.log").read()
c = re.search(r"device copies.*?: ([0-9.]+) GB to the GPU, ([0-9.]+) GB back", new)
pcie_gb = (float(c.group(1)) + float(c.group(2))) / int(steps) if c else float("nan")
pcie_s = (float(c.group(1)) / float(up) + float(c.group(2)) / float(down)) / int(steps) if c else float("nan")
compute = mem["step_seconds"]
bound = max(compute, io, pcie_s)
print(f"| {case} | {tag} | {budget} | {ooc['step_seconds']:.3f} | {rb:.2f} + {wb:.2f} | {io:.3f} | "
      f"{pcie_gb:.2f} | {pcie_s:.3f} | {compute:.3f} | {bound:.3f} | {bound / ooc['step_seconds']:.2f} |")
PY
    grep -h "device copies\|streams its layers" "$dir/$case-$tag.log" | sed 's/^/    /'
  done
done
