#!/usr/bin/env bash
# GPT-2 fine-tuning out of core against the bound (issue 35): a GPT-2-shaped checkpoint (124M
# by default) fine-tunes STEPS steps on the fortunes tokens (launch/fortunes-corpus.sh) on one
# stage, once in memory and once streamed from flash under a memory budget; printed for each:
# tokens/s, and for the streamed run its bound line (bytes read and written per step, compute
# and I/O time per step, the flash's measured bandwidth). The bound is the lower of the
# in-memory tokens/s and the flash-bound tokens/s (tokens per step / I/O seconds per step);
# the streamed run's tokens/s is quoted against it.
#
# Without a checkpoint, a randomly initialised GPT-2 of the shape is written by
# tests/gpt2_reference.py (python3-torch) and imported with fgpipe-convert --ctx CTX: the speed
# does not depend on the weights.
#
# usage: bench/bench_finetune_ooc.sh [SIZE [BUDGET [STEPS [CTX [CHECKPOINT]]]]]
#   defaults: 124m 2600M 6 128; DIR=/var/tmp/fgpipe-finetune (flash: ~2 GB per 124M, 4.4x that
#   for the store's two slots per layer); OMP_NUM_THREADS defaults to 1 (a core left for I/O).
#   SETS="key=value ..." adds config keys to both runs (e.g. table_block_rows=4096).
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-124m} budget=${2:-2600M} steps=${3:-6} ctx=${4:-128} checkpoint=${5:-}
dir=${DIR:-/var/tmp/fgpipe-finetune}
config=launch/configs/gpt2-$size.conf
[ -f "$config" ] || { echo "no $config (124m, 355m, 774m, 1.5b)" >&2; exit 2; }
[ -x build/fgpipe ] || { echo "build first: launch/build.sh" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$dir"
if [ -z "$checkpoint" ]; then
  checkpoint=$dir/gpt2-$size-ctx$ctx.h5
  bench/gpt2-random-checkpoint.sh "$size" "$ctx" "$checkpoint"
fi
{ read -r train; read -r val; } < <(launch/fortunes-corpus.sh)
head -c 20000 "$val" >"$dir/val-small.bin"  # the end-of-run evaluation is not timed; keep it short
common=(--config "$config" --init-from "$checkpoint" --set ctx="$ctx" --set steps="$steps"
        --set micro_batches=4 --set micro_batch=1 --set train_tokens="$train"
        --set val_tokens="$dir/val-small.bin" --set print_every=1000000 --no-checkpoint)
for kv in ${SETS:-}; do common+=(--set "$kv"); done
rm -rf "$dir/flash" && mkdir -p "$dir/flash"
build/fgpipe train "${common[@]}" --summary-json "$dir/mem.json" >"$dir/mem.log" 2>&1
build/fgpipe train "${common[@]}" --mem-budget "$budget" --weights-dir "$dir/flash" \
  --summary-json "$dir/ooc.json" >"$dir/ooc.log" 2>&1
rm -rf "$dir/flash"
grep "out of core:" "$dir/ooc.log" || true
/usr/bin/python3 - "$dir" "$size" "$budget" "$ctx" <<'PY'
import json, re, sys
d, size, budget, ctx = sys.argv[1:5]
mem, ooc = (json.load(open(f"{d}/{n}.json")) for n in ("mem", "ooc"))
line = next(l for l in open(f"{d}/ooc.log") if "out of core:" in l)
io = float(re.search(r"I/O ([0-9.]+) s per step", line).group(1))
compute = float(re.search(r"compute ([0-9.]+) s per step", line).group(1))
tokens = 4 * 1 * int(ctx)
flash_bound = tokens / io
bound = min(mem["tokens_per_s"], flash_bound)
print(f"\n| GPT-2 {size}, ctx {ctx}, 4 x 1 sequences | tokens/s | peak RSS GB | step s |")
print("|---|---|---|---|")
print(f"| in memory | {mem['tokens_per_s']:.1f} | {mem['peak_rss_bytes'] / 1e9:.2f} | {mem['step_seconds']:.2f} |")
print(f"| streamed, mem_budget {budget} | {ooc['tokens_per_s']:.1f} | {ooc['peak_rss_bytes'] / 1e9:.2f} | {ooc['step_seconds']:.2f} |")
print(f"\nflash-bound tokens/s {flash_bound:.1f} (I/O {io:.2f} s per step), streamed compute {compute:.2f} s per step; "
      f"bound = min(in memory, flash) = {bound:.1f} tokens/s; streamed: {ooc['tokens_per_s'] / bound:.0%} of it; "
      f"same losses: {mem['val_loss'] == ooc['val_loss']}")
own = max(compute, io)
print(f"the streamed run against its own bound, max(compute, I/O) = {own:.2f} s per step: "
      f"{own / ooc['step_seconds']:.0%} (no second run in it: steadier on a shared machine)")
PY
