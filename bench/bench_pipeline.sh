#!/usr/bin/env bash
# Pipeline benchmark: M stages (default 4) on the default MLP, N = 8 and 32 micro-batches,
# for bp-gpipe, bp-1f1b, fg and fg+bp (auto selection). Prints one table: median step time,
# peak RSS of each rank, the timetable's bubble and the share of it used by B ops (planned,
# and measured on the last step). usage: bench/bench_pipeline.sh [STEPS] [M]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20} M=${2:-4}
fgpipe=build/fgpipe config=launch/configs/fashion-mnist-mlp-fg.conf
[ -x "$fgpipe" ] || { echo "bench_pipeline: build first (launch/build.sh)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
threads=$(( $(nproc) / M )); [ "$threads" -ge 1 ] || threads=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cases=("bp-gpipe mode=bp schedule=gpipe" "bp-1f1b mode=bp schedule=1f1b" "fg mode=fg" "fg+bp mode=fg+bp")
for N in 8 32; do
  for c in "${cases[@]}"; do
    set -- $c; name=$1; shift
    sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
    mpirun -np "$M" --oversubscribe ${FGPIPE_MPI_ARGS:-} --bind-to none -x OMP_NUM_THREADS="$threads" "$fgpipe" train \
      --config "$config" --set stages="$M" --set micro_batches="$N" --set steps="$steps" \
      --set print_every=1000000 "${sets[@]}" --summary-json "$dir/$name-$N.json" >/dev/null 2>"$dir/$name-$N.err" \
      || { cat "$dir/$name-$N.err" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$dir" "$M" "$steps" <<'PY'
import json, sys, glob, os
d, M, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"fgpipe pipeline bench: M={M} stages, default MLP, micro-batch 32, {steps} steps, {os.cpu_count()} cores")
print(f"{'mode':10} {'N':>3} {'n_sel':>5} {'step ms':>8} {'vs fg':>6} {'peak RSS MiB per rank':>22} {'stash MiB per rank':>22} {'bubble plan':>11} {'used by B':>9} {'bubble run':>10}")
rows = {}
for N in (8, 32):
    for name in ("bp-gpipe", "bp-1f1b", "fg", "fg+bp"):
        r = json.load(open(f"{d}/{name}-{N}.json"))
        rows[name, N] = r
for N in (8, 32):
    fg = rows["fg", N]["step_seconds"]
    for name in ("bp-gpipe", "bp-1f1b", "fg", "fg+bp"):
        r = rows[name, N]
        rss = " ".join(f"{x/2**20:.0f}" for x in r["peak_rss_stage"])
        stash = " ".join(f"{x/2**20:.1f}" for x in r["stash_bytes_stage"])
        print(f"{name:10} {N:>3} {r['n_sel']:>5} {1e3*r['step_seconds']:>8.1f} {r['step_seconds']/fg:>6.2f} {rss:>22} {stash:>22} "
              f"{100*r['bubble_planned']:>10.1f}% {100*r['bubble_used_by_b']:>8.1f}% {100*r['bubble_measured']:>9.1f}%")
PY
