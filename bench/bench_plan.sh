#!/usr/bin/env bash
# Planned pipelines beyond this machine's cores: fgpipe plan for M = 4, 8, 16 stages and N = 4,
# 8, 32 micro-batches of the main job's config (its width, 784-768x16-10 by default so that 16
# stages can be cut), op costs timed here one stage at a time with one thread (a core per
# rank). Prints, per (M, N), each schedule's planned step and bubble, the activation memory of
# its largest stage and fg+bp's corrections (B ops per stage per step, smallest..largest).
#
# usage: bench/bench_plan.sh [MODEL] [CONFIG]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-784-768-768-768-768-768-768-768-768-768-768-768-768-768-768-768-768-10}
config=${2:-launch/configs/fashion-mnist-mlp-fgbp.conf}
fgpipe=build/fgpipe
[ -x "$fgpipe" ] || { echo "bench_plan: build first (launch/build.sh)" >&2; exit 2; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
echo "fgpipe plan of $config with model = $model, one thread per stage (OMP_NUM_THREADS=1)"
echo
echo "| M | N | bp-gpipe | bp-1f1b | bp-zb | fg | fg+bp | fg+bp B ops/stage | activations MiB (gpipe, 1f1b, zb, fg, fg+bp) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
for M in 4 8 16; do
  for N in 4 8 32; do
    OMP_NUM_THREADS=1 "$fgpipe" plan --config "$config" --set model="$model" --set stages=$M \
      --set micro_batches=$N --json "$dir/plan.json" >"$dir/plan.txt" 2>&1 ||
      { echo "| $M | $N | failed: $(tail -n 1 "$dir/plan.txt") |"; continue; }
    /usr/bin/python3 - "$dir/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
by = {s["schedule"]: s for s in p["schedules"]}
names = ["bp-gpipe", "bp-1f1b", "bp-zb", "fg", "fg+bp"]
cells = [f"{1e3 * by[n]['step_seconds']:.1f} ms ({100 * by[n]['bubble']:.0f}%)" for n in names]
b = by["fg+bp"]["b_ops"]
act = ", ".join(f"{max(by[n]['activation_bytes']) / 2**20:.1f}" for n in names)
corr = f"{min(b):.3g}" + (f"..{max(b):.3g}" if max(b) > min(b) else "")
print(f"| {p['stages']} | {p['micro_batches']} | " + " | ".join(cells) + f" | {corr} | {act} |")
PY
  done
done
echo
echo "step (bubble: idle share of M x step). Op costs timed alone run about 15% short of the"
echo "same ops in a pipeline whose stages share the machine (docs/pipeline.md, Planning)."
