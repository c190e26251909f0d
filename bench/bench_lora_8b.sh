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
llama3_window "$dir" "$ctx"

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

/usr/bin/python3 bench/stream_report.py "$dir" "$name, LoRA r16, ctx $ctx" "${runs[@]}"
