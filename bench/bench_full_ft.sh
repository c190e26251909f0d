#!/usr/bin/env bash
# A full fine-tune larger than the machine (issue 53, item 4; docs/out-of-core.md, "A full
# fine-tune larger than the machine"): Llama-3.2-3B's shape (launch/configs/llama-3.2-3b.conf:
# 3.21 G parameters, 38.5 GB of weights and AdamW state, 1.6x this machine's 24 GiB) trained
# from random weights (the seed) on one stage under --mem-budget BUDGET, bp, every layer
# trained, on one window of the fortunes in Llama 3's ids (the loss must fall step by step):
#   stopped   STEPS steps, its store kept;
#   resumed   the same store reopened with --resume-weights and run on to STEPS + 2 steps;
#   full      STEPS + 2 steps uninterrupted, on a new store.
# resumed's last two steps and its final validation loss must be full's, bit for bit (the
# store's versions are the run's checkpoint: a separate checkpoint file would take another
# 38.5 GB). Each run prints every step's I/O line; the table: losses, peak RSS against the
# budget, GB read per step, bound / step.
#
# usage: bench/bench_full_ft.sh [BUDGET [STEPS [CTX]]]
#   defaults: 6G 3 64. DIR (default /var/tmp/fgpipe-3b) needs the store: two versions of every
#   layer's weights and AdamW state, 78.7 GB for the 3B (a run refuses by name, before writing,
#   when the disk lacks it). CONFIG=another config; SETS="n_layer=20 ..." more --set overrides
#   (a smaller store). OMP_NUM_THREADS defaults to 1 (a core left for the I/O thread).
#   PRECISION (fp32): bf16 computes in mixed precision (FP32 masters and state on flash).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
budget=${1:-6G} steps=${2:-3} ctx=${3:-64}
config=${CONFIG:-launch/configs/llama-3.2-3b.conf}
dir=${DIR:-/var/tmp/fgpipe-3b}
name=$(basename "$config" .conf)
[ -x build/fgpipe ] || { echo "build first: launch/build.sh" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$dir"
llama3_window "$dir" "$ctx"

sets=()
for s in ${SETS:-}; do sets+=(--set "$s"); done
common=(--config "$config" --set ctx="$ctx" --set micro_batches=1 --set micro_batch=1
        --set lr=0.0001 --set warmup_steps=0 --set lr_schedule=constant
        --set train_tokens="$dir/window.bin" --set val_tokens="$dir/window.bin" --set print_every=1
        --set io_every_step=1 --set precision="${PRECISION:-fp32}" "${sets[@]}"
        --mem-budget "$budget" --weights-dir "$dir/flash" --no-checkpoint)

run() {  # NAME [ARGS]: one streamed run into $dir/NAME.{log,json,time} and $dir/NAME/loss.csv
  local name=$1; shift
  echo "$budget" >"$dir/$name.budget"
  rm -rf "${dir:?}/$name"
  echo "== $name: build/fgpipe train ${common[*]} $*" >&2
  /usr/bin/time -v -o "$dir/$name.time" build/fgpipe train "${common[@]}" "$@" --out "$dir/$name" \
    --summary-json "$dir/$name.json" >"$dir/$name.log" 2>&1 || { tail -5 "$dir/$name.log" >&2; exit 1; }
  grep -E "streams|step [0-9]+ I/O|out of core" "$dir/$name.log" >&2
}

rm -rf "$dir/flash" && mkdir -p "$dir/flash"
run stopped --set steps="$steps"
run resumed --set steps=$((steps + 2)) --resume-weights
rm -rf "$dir/flash" && mkdir -p "$dir/flash"
run full --set steps=$((steps + 2))
rm -rf "$dir/flash"

/usr/bin/python3 bench/stream_report.py "$dir" "$name, full fine-tune, AdamW, ctx $ctx" stopped resumed full
/usr/bin/python3 - "$dir" "$steps" <<'PY'
import csv, json, sys
d, steps = sys.argv[1], int(sys.argv[2])
def rows(n):
    with open(f"{d}/{n}/loss.csv") as f:
        return {int(r["step"]): r["loss"] for r in csv.DictReader(f)}
resumed, full = rows("resumed"), rows("full")
later = [s for s in sorted(full) if s >= steps]
same = all(resumed.get(s) == full[s] for s in later)
val = [json.load(open(f"{d}/{n}.json"))["val_loss"] for n in ("resumed", "full")]
print(f"\nresumed at step {steps}: steps {later} {'equal' if same else 'DIFFER FROM'} the "
      f"uninterrupted run's ({[resumed.get(s) for s in later]} / {[full[s] for s in later]}); "
      f"final validation loss {val[0]!r} / {val[1]!r}: {'bit for bit' if val[0] == val[1] else 'DIFFERENT'}")
sys.exit(0 if same and val[0] == val[1] else 1)
PY
