#!/usr/bin/env bash
# Bubble benchmark: how much of the pipeline's fill/drain bubble fg+bp's backprop fills, and
# what it costs against plain fg. For each M (stages, one MPI rank each) and N (micro-batches
# per step): fg, fg+bp (default selection: the builder's auto timetable) and bp-1f1b for
# reference, on an MLP of 8 linear layers (784-1024x7-10, so that 8 stages are possible).
# Prints one table: step time (median) and its ratio to fg's, the planned and measured bubble,
# the share of it used by B ops (planned; measured: the median over the second half of the
# steps), corrections per step, their largest lag and the stash MiB, per stage. Each case runs
# REPEAT times (default 2), the modes taking turns, and the run with the shortest step counts:
# on a shared machine a slow run is the machine's load, not the timetable's.
#
# usage: bench/bench_pipeline.sh [STEPS] [M ...]
#   default STEPS 30; default M: those of 2 4 8 with a core per rank on this machine
#   (one GPU machine's 16 cores: 2 4 8; a 2-core machine: 2). FGPIPE_MPI_ARGS adds mpirun flags.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}; shift || true
repeat=${REPEAT:-2}
Ms=("$@")
if [ ${#Ms[@]} -eq 0 ]; then for M in 2 4 8; do [ "$M" -le "$(nproc)" ] && Ms+=("$M"); done; fi
[ ${#Ms[@]} -gt 0 ] || Ms=(2)
fgpipe=build/fgpipe config=launch/configs/fashion-mnist-mlp-fgbp.conf
model=784-1024-1024-1024-1024-1024-1024-1024-10
[ -x "$fgpipe" ] || { echo "bench_pipeline: build first (launch/build.sh)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cases=("fg mode=fg" "fg+bp mode=fg+bp" "bp-1f1b mode=bp schedule=1f1b optimizer=adam lr=0.001")
for M in "${Ms[@]}"; do
  threads=$(( $(nproc) / M )); [ "$threads" -ge 1 ] || threads=1
  over=(); [ "$M" -gt "$(nproc)" ] && over=(--oversubscribe)
  for N in 8 32; do
    for rep in $(seq "$repeat"); do for c in "${cases[@]}"; do
      set -- $c; name=$1; shift
      sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
      run=$dir/$name-M$M-N$N-$rep
      mpirun -np "$M" "${over[@]}" ${FGPIPE_MPI_ARGS:-} --bind-to none -x OMP_NUM_THREADS="$threads" \
        "$fgpipe" train --config "$config" --set model=$model --set stages="$M" --set micro_batches="$N" \
        --set steps="$steps" --set print_every=1000000 "${sets[@]}" --out "$run" \
        --summary-json "$run.json" >/dev/null 2>"$run.err" || { cat "$run.err" >&2; exit 1; }
    done; done
  done
done
/usr/bin/python3 - "$dir" "$steps" "$repeat" "${Ms[@]}" <<'PY'
import json, os, statistics, sys
d, steps, repeat, Ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(m) for m in sys.argv[4:]]
print(f"fgpipe bubble bench: MLP 784-1024x7-10, micro-batch 32, {steps} steps, {os.cpu_count()} cores, "
      f"best of {repeat} runs")
def best(name, M, N):  # the run with the shortest step
    runs = [f"{d}/{name}-M{M}-N{N}-{rep}" for rep in range(1, repeat + 1)]
    return min(runs, key=lambda run: json.load(open(f"{run}.json"))["step_seconds"])
print("bubble: idle share of the step (plan / measured); used by B: share of fg's bubble that Bi/Bw fill "
      "(plan / measured median); per stage: corrections per step, largest lag, stash MiB")
print(f"{'M':>2} {'N':>3} {'mode':8} {'step ms':>8} {'x fg':>5} {'bubble':>11} {'used by B':>11}  per stage")
def used_measured(run):
    rows = [l.split(",") for l in open(f"{run}/loss.csv").read().split("\n")[1:] if l]
    return statistics.median(float(r[6]) for r in rows[len(rows) // 2:])
for M in Ms:
    for N in (8, 32):
        fg = json.load(open(f"{best('fg', M, N)}.json"))["step_seconds"]
        for name in ("fg", "fg+bp", "bp-1f1b"):
            run = best(name, M, N)
            r = json.load(open(f"{run}.json"))
            stage = ""
            if name == "fg+bp":
                used = f"{100 * r['bubble_used_by_b']:4.0f}/{100 * used_measured(run):3.0f}%"
                stage = "  ".join(f"{c:g} L{l:.0f} {b / 2**20:.1f}" for c, l, b in
                                  zip(r["n_corr_stage"], r["lag_stage"], r["stash_bytes_stage"]))
            else:
                used = ""
                if name == "bp-1f1b":
                    stage = "stash MiB " + " ".join(f"{b / 2**20:.1f}" for b in r["stash_bytes_stage"])
            print(f"{M:>2} {N:>3} {name:8} {1e3 * r['step_seconds']:8.1f} {r['step_seconds'] / fg:5.2f} "
                  f"{100 * r['bubble_planned']:4.0f}/{100 * r['bubble_measured']:3.0f}% {used:>11}  {stage}")
PY
