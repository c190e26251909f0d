#!/usr/bin/env bash
# An 8B Llama LoRA-fine-tuned from flash on this node (issue 53, item 3; docs/out-of-core.md,
# "Larger than the machine: Llama-3.1-8B"): Llama-3.1-8B's shape (launch/configs/llama-3.1-8b.conf)
# with random weights, written as a Hugging Face directory of BF16 shards block by block
# (bench/bench_convert.sh), imported with tools/fgpipe-convert (BF16 kept: 16 GB), then LoRA
# rank 16 on q,k,v,o,gate,up,down trained STEPS steps on one stage under --mem-budget BUDGET on
# one window of the fortunes tokenized by Llama 3's tokenizer.json (every step sees the same
# ctx + 1 tokens: the loss must fall step by step), in bp, fg and fg+bp with the base stored as
# imported (BF16) and, for bp, widened to FP32 (frozen_fp32 = 1: 32 GB on flash, more than this
# machine's memory). Each run prints every step's I/O line (GB read and written, I/O and compute
# seconds, the bound max(I/O, compute) and bound / step); the table: losses, peak RSS against the
# budget, GB read per step, bound / step. bf16-bp's adapters are exported in PEFT's layout.
#
# usage: bench/bench_lora_8b.sh [BUDGET [STEPS [CTX]]]
#   defaults: 8G 3 64. DIR (default /var/tmp/fgpipe-8b) needs 16 GB for the checkpoint and, while
#   a run lasts, its store (16 GB BF16, 32 GB FP32) and bf16-bp's checkpoint (16 GB); the Hugging
#   Face directory (16 GB) is removed once imported. OMP_NUM_THREADS defaults to 1 (a core left
#   for the I/O thread). RUNS="bf16-bp fp32-bp" runs only those (default: bf16-bp bf16-fg
#   bf16-fgbp fp32-bp). CONFIG=another Llama config (its shape is written and imported).
#   FGBP_BUDGET (default BUDGET): fg+bp's, whose floor is higher (it keeps two steps' saved
#   inputs: 12.9 GB at ctx 64 where bp's is 7.1 and fg's 4.4). PRECISION (fp32): bf16 runs every
#   row in mixed precision (a CPU with AVX512-BF16): the BF16 base feeds the BF16 GEMMs as read.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
budget=${1:-8G} steps=${2:-3} ctx=${3:-64}
config=${CONFIG:-launch/configs/llama-3.1-8b.conf}
dir=${DIR:-/var/tmp/fgpipe-8b}
name=$(basename "$config" .conf)
[ -x build/fgpipe ] || { echo "build first: launch/build.sh" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$dir"

checkpoint=$dir/$name.h5
if [ ! -f "$checkpoint" ]; then
  DIR=$dir EXPORT=0 bench/bench_convert.sh "$config" 4
  rm -rf "${dir:?}/$name-4"  # the Hugging Face directory: the stores need its room
fi
# One window of ctx + 1 tokens of the fortunes (Llama 3's ids, uint32 after the FGTOKU32 header).
text=$(launch/fortunes-corpus.sh --text | tail -n 1)
build/fgpipe tokenize --tokenizer "$(launch/hf-tokenizer.sh llama3)" --in "$text" --out "$dir/val-llama3.bin"
/usr/bin/python3 - "$dir/val-llama3.bin" "$dir/window.bin" "$ctx" <<'PY'
import sys
src, out, ctx = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
assert data[:8] == b"FGTOKU32", "expected uint32 tokens"
open(out, "wb").write(data[:8 + 4 * (ctx + 1)])
PY

common=(--config "$config" --init-from "$checkpoint" --set lora_rank=16 --set lora_alpha=32
        --set lora_targets=q,k,v,o,gate,up,down --set ctx="$ctx" --set steps="$steps"
        --set micro_batches=1 --set micro_batch=1 --set lr=0.001 --set warmup_steps=0
        --set lr_schedule=constant --set train_tokens="$dir/window.bin" --set val_tokens="$dir/window.bin"
        --set print_every=1 --set io_every_step=1 --set precision="${PRECISION:-fp32}"
        --weights-dir "$dir/flash")
fgbp_budget=${FGBP_BUDGET:-$budget}

run() {  # NAME BUDGET [ARGS]: one streamed run into $dir/NAME.{log,json}, its store removed after
  local name=$1 mem=$2; shift 2
  echo "$mem" >"$dir/$name.budget"
  rm -rf "$dir/flash" "$dir/$name" && mkdir -p "$dir/flash"
  echo "== $name: build/fgpipe train ${common[*]} $*" >&2
  /usr/bin/time -v -o "$dir/$name.time" build/fgpipe train "${common[@]}" --mem-budget "$mem" "$@" --out "$dir/$name" \
    --summary-json "$dir/$name.json" >"$dir/$name.log" 2>&1 || { tail -5 "$dir/$name.log" >&2; exit 1; }
  grep -E "streams its layers|step [0-9]+ I/O|out of core" "$dir/$name.log" >&2
  rm -rf "$dir/flash"
}

runs=(${RUNS:-bf16-bp bf16-fg bf16-fgbp fp32-bp})
if selected bf16-bp "${runs[@]}"; then
  run bf16-bp "$budget" --set mode=bp
  tools/fgpipe-convert export-lora "$dir/bf16-bp/checkpoint.h5" "$dir/bf16-bp-peft" >&2
  ls -l "$dir/bf16-bp-peft" >&2
  rm -f "$dir/bf16-bp/checkpoint.h5"
fi
selected bf16-fg "${runs[@]}" && run bf16-fg "$budget" --set mode=fg --no-checkpoint
selected bf16-fgbp "${runs[@]}" && run bf16-fgbp "$fgbp_budget" --set mode=fg+bp --no-checkpoint
selected fp32-bp "${runs[@]}" && run fp32-bp "$budget" --set mode=bp --set frozen_fp32=1 --no-checkpoint

/usr/bin/python3 - "$dir" "$name" "$budget" "$ctx" "${runs[@]}" <<'PY'
import json, re, sys
d, name, budget, ctx, *runs = sys.argv[1:]
units = {"K": 2**10, "M": 2**20, "G": 2**30}
def size(b):
    return float(b[:-1]) * units[b[-1]] if b[-1] in units else float(b)
step_re = re.compile(r"step (\d+) I/O: read ([0-9.]+) GB, wrote ([0-9.]+) GB, I/O ([0-9.]+) s, "
                     r"compute ([0-9.]+) s, bound ([0-9.]+) s \((\w+)\), step ([0-9.]+) s")
print(f"\n| {name}, LoRA r16, ctx {ctx} | step | GB read | GB written | I/O s | compute s | bound s | step s | bound / step |")
print("|---|---|---|---|---|---|---|---|---|")
summary = []
for n in runs:
    log = open(f"{d}/{n}.log").read()
    rows = [m.groups() for m in step_re.finditer(log)]
    for r in rows:
        print(f"| {n} | {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} ({r[6]}) | {r[7]} | {float(r[5]) / float(r[7]):.2f} |")
    losses = [float(x) for x in re.findall(r"step \d+/\d+\s+loss ([0-9.]+)", log)]
    val = re.search(r"val loss ([0-9.]+)", log)
    if val:
        losses.append(float(val.group(1)))  # after the last step
    rss = json.load(open(f"{d}/{n}.json"))["peak_rss_bytes"]
    later = rows[1:] or rows
    ratio = sum(float(r[5]) for r in later) / sum(float(r[7]) for r in later)
    read = sum(float(r[1]) for r in later) / len(later)
    summary.append((n, losses, rss, read, ratio, size(open(f"{d}/{n}.budget").read().strip())))
print(f"\n| run | loss on the window, each step, then after the last | peak RSS GB | budget GB | RSS / budget | GB read per step | bound / step (steps 2..) |")
print("|---|---|---|---|---|---|---|")
for n, losses, rss, read, ratio, budget_bytes in summary:
    print(f"| {n} | {' '.join(f'{x:.3f}' for x in losses)} | {rss / 1e9:.2f} | {budget_bytes / 1e9:.2f} | "
          f"{rss / budget_bytes:.2f} | {read:.2f} | {ratio:.2f} |")
PY
