#!/usr/bin/env bash
# One node trains a model larger than its memory budget (issue 42): GPT-2 1.5B's shape
# (launch/configs/gpt2-1.5b.conf: 1.64 G parameters with the tied table's second copy, 19.7 GB
# of weights and AdamW state on flash) trained out of core on one stage with a memory budget,
# bp-zb, ctx CTX, one sequence a step:
#   1. from random weights (the seed);
#   2. from a checkpoint imported with tools/fgpipe-convert: a random-weight GPT-2 of that shape
#      in Hugging Face's layout (tests/gpt2_reference.py --weights-only);
#   3. from random weights with 2 replicas on this node sharing the one store (mpirun -np 2):
#      the node's bytes per step should be one replica's.
# Each run prints every step's I/O (io_every_step = 1): GB read and written, I/O seconds (time
# with any read or write running), compute seconds (the step less its waits for layers), the
# bound max(I/O, compute) and bound / step; then the table: loss first and last, peak RSS
# (summary.json peak_rss_bytes) against the budget, bound / step over the steps after the first.
#
# usage: bench/bench_larger_than_memory.sh [BUDGET [STEPS [CTX [SIZE]]]]
#   defaults: 3G 6 64 1.5b (bp's floor at ctx 64 is 2.92 GB: one slot of the token table, two
#   small ones and the activations; 3G leaves room for four small slots; at ctx 128 it is 3.67 GB,
#   and 4.44 GB with two slots of the table, which then stays in memory). DIR (default /var/tmp/fgpipe-ltm) needs about 2 x 19.7 GB for
#   the store (two slots per layer) and 13 GB more while importing (the safetensors file and
#   the checkpoint). OMP_NUM_THREADS defaults to 1 (a core left for the I/O threads).
#   Takes about 12 minutes per run on a 2-core machine with a 1-1.5 GB/s disk.
#   RUNS="random replicas" runs only those (default: all three).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
budget=${1:-3G} steps=${2:-6} ctx=${3:-64} size=${4:-1.5b}
dir=${DIR:-/var/tmp/fgpipe-ltm}
config=launch/configs/gpt2-$size.conf
[ -f "$config" ] || { echo "no $config (124m, 355m, 774m, 1.5b)" >&2; exit 2; }
[ -x build/fgpipe ] || { echo "build first: launch/build.sh" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$dir"
{ read -r _train; read -r val; } < <(launch/fortunes-corpus.sh)
# One window of fortunes, trained on and scored: every step sees the same ctx + 1 tokens, so the
# loss must fall step by step (one sequence of other windows a step would be noise), and the
# end-of-run evaluation scores that window (a longer one would read the store once per window).
head -c $(( 2 * (ctx + 1) )) "$val" >"$dir/window.bin"
head -c $(( 2 * (2 * ctx + 1) )) "$val" >"$dir/windows2.bin"  # one window per replica
common=(--config "$config" --set ctx="$ctx" --set steps="$steps" --set micro_batches=1
        --set micro_batch=1 --set lr=0.0001 --set warmup_steps=0 --set lr_schedule=constant
        --set train_tokens="$dir/window.bin" --set val_tokens="$dir/window.bin" --set print_every=1
        --set io_every_step=1 --no-checkpoint --mem-budget "$budget" --weights-dir "$dir/flash")

run() {  # NAME [LAUNCHER ... --] [ARGS]: one streamed run into $dir/NAME.{log,json}
    local name=$1 launch=(); shift
    if [ "${1:-}" = mpirun ]; then while [ "$1" != -- ]; do launch+=("$1"); shift; done; shift; fi
    rm -rf "$dir/flash" && mkdir -p "$dir/flash"
    echo "== $name: ${launch[*]} build/fgpipe train ${common[*]} $*" >&2
    "${launch[@]}" build/fgpipe train "${common[@]}" "$@" --summary-json "$dir/$name.json" >"$dir/$name.log" 2>&1 ||
        { tail -5 "$dir/$name.log" >&2; exit 1; }
    grep -E "streams its layers|step [0-9]+ I/O" "$dir/$name.log" >&2
    rm -rf "$dir/flash"
}

runs=(${RUNS:-random imported replicas})
selected random "${runs[@]}" && run random
if selected imported "${runs[@]}"; then
  checkpoint=$dir/gpt2-$size-ctx$ctx.h5
  bench/gpt2-random-checkpoint.sh "$size" "$ctx" "$checkpoint"
  run imported --init-from "$checkpoint"
  rm -f "$checkpoint"  # 6.5 GB; the shared store needs the room
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
selected replicas "${runs[@]}" && run replicas mpirun -np 2 --bind-to none -x OMP_NUM_THREADS -- \
  --set replicas=2 --set train_tokens="$dir/windows2.bin" --set val_tokens="$dir/windows2.bin"

/usr/bin/python3 - "$dir" "$size" "$budget" "$ctx" "${runs[@]}" <<'PY'
import json, re, sys
d, size, budget, ctx, *names = sys.argv[1:]
units = {"K": 2**10, "M": 2**20, "G": 2**30}
budget_bytes = float(budget[:-1]) * units[budget[-1]] if budget[-1] in units else float(budget)
step_re = re.compile(r"step (\d+) I/O: read ([0-9.]+) GB, wrote ([0-9.]+) GB, I/O ([0-9.]+) s, "
                     r"compute ([0-9.]+) s, bound ([0-9.]+) s \((\w+)\), step ([0-9.]+) s")
print(f"\n| GPT-2 {size}, ctx {ctx}, mem_budget {budget} | step | GB read | GB written | I/O s | compute s | bound s | step s | bound / step |")
print("|---|---|---|---|---|---|---|---|---|")
summary, reads = [], {}
for n in names:
    log = open(f"{d}/{n}.log").read()
    rows = [m.groups() for m in step_re.finditer(log)]
    for r in rows:
        print(f"| {n} | {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} ({r[6]}) | {r[7]} | {float(r[5]) / float(r[7]):.2f} |")
    losses = [float(x) for x in re.findall(r"step \d+/\d+\s+loss ([0-9.]+)", log)]
    losses.append(float(re.search(r"val loss ([0-9.]+)", log).group(1)))  # after the last step
    js = json.load(open(f"{d}/{n}.json"))
    later = rows[1:] or rows
    ratio = sum(float(r[5]) for r in later) / sum(float(r[7]) for r in later)
    summary.append((n, losses, js["peak_rss_bytes"], ratio))
    reads[n] = sum(float(r[1]) for r in later) / len(later)
print(f"\n| run | loss on the window, each step, then after the last | peak RSS GB | budget GB | RSS / budget | bound / step (steps 2..) |")
print("|---|---|---|---|---|---|")
for n, losses, rss, ratio in summary:
    print(f"| {n} | {' '.join(f'{x:.3f}' for x in losses)} | {rss / 1e9:.2f} | {budget_bytes / 1e9:.2f} | "
          f"{rss / budget_bytes:.2f} | {ratio:.2f} |")
if "replicas" in reads and "random" in reads:
    print(f"\n2 replicas sharing the store read {reads['replicas']:.3f} GB per step, one replica "
          f"{reads['random']:.3f}: {reads['replicas'] / reads['random']:.3f} of it")
PY
