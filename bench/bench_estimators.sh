#!/usr/bin/env bash
# Estimator benchmark: test accuracy of every way fgpipe estimates the gradient, on the default
# MLP (Fashion-MNIST, 784-1024-1024-1024-10, steps of 4 micro-batches of 32), with the same
# steps and micro-batches for all: bp; fg with weight (K = 1 and 4, low-rank r = 1 and 8) and
# activity perturbation (K = 1 and 4; with local losses, G = 32 groups, K = 4 to 32)
# on 1 rank; fg+bp on 4 stages (one rank each, the default selection: the corrections the
# 4-stage timetable gives) with each estimator. Prints one table: test accuracy, final train
# loss, samples/s, peak RSS of the largest rank, kept activations (stash) of the largest stage,
# and for fg+bp the median over the steps of the cosine between the update and the exact
# gradient c (from the --log file). Each row's options are the row's config on top of
# launch/configs/fashion-mnist-mlp-fg.conf, so a row can be rerun by hand.
#
# usage: bench/bench_estimators.sh [EPOCHS] [ROW ...]
#   default EPOCHS 1 (the 5-epoch table: bench/bench_estimators.sh 5); ROW: names to run
#   (default all). samples/s of the 4-stage rows is 4 ranks on this machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
epochs=${1:-1}; shift || true
fgpipe=build/fgpipe config=launch/configs/fashion-mnist-mlp-fg.conf
[ -x "$fgpipe" ] || { echo "bench_estimators: build first (launch/build.sh)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
adam=(optimizer=adam lr=0.001)
act=(perturb=activity local_groups=0 tangents=1 optimizer=adam lr=0.0003)
local=(perturb=activity optimizer=adam lr=0.001)  # local losses: the launch config's fg
weight=(perturb=weight local_groups=0 tangents=1 optimizer=sgd momentum=0.9 lr=0.00002)  # Adam amplifies its noise
rows=(
  "bp|1|mode=bp schedule=gpipe local_groups=0 ${adam[*]}"
  "fg weight K=1|1|mode=fg ${weight[*]}"
  "fg weight K=4|1|mode=fg ${weight[*]} tangents=4"
  "fg weight low-rank r=1|1|mode=fg ${weight[*]} tangent_rank=1"
  "fg weight low-rank r=8|1|mode=fg ${weight[*]} tangent_rank=8"
  "fg activity K=1|1|mode=fg ${act[*]}"
  "fg activity K=4|1|mode=fg ${act[*]} tangents=4"
  "fg activity local G=32 K=4|1|mode=fg ${local[*]} local_groups=32 tangents=4"
  "fg activity local G=32 K=8|1|mode=fg ${local[*]} local_groups=32 tangents=8"
  "fg activity local G=32 K=16|1|mode=fg ${local[*]} local_groups=32 tangents=16"
  "fg activity local G=32 K=32|1|mode=fg ${local[*]} local_groups=32 tangents=32"
  "fg+bp weight cv|4|mode=fg+bp ${weight[*]} estimator=cv"
  "fg+bp weight cv shrink=0.05|4|mode=fg+bp ${weight[*]} estimator=cv shrink=0.05"
  "fg+bp activity mix shrink=1 (fg)|4|mode=fg+bp ${act[*]} estimator=mix shrink=1"
  "fg+bp activity mix shrink=0.2|4|mode=fg+bp ${act[*]} estimator=mix shrink=0.2"
  "fg+bp activity mix shrink=0.05|4|mode=fg+bp ${act[*]} estimator=mix shrink=0.05"
  "fg+bp activity mix shrink=0 (c)|4|mode=fg+bp ${act[*]} estimator=mix shrink=0"
  "fg+bp activity mix shrink=0 (c) lr 1e-3|4|mode=fg+bp ${act[*]} estimator=mix shrink=0 lr=0.001"
  "fg+bp activity local mix shrink=0.2|4|mode=fg+bp ${local[*]} local_groups=32 tangents=16 estimator=mix shrink=0.2"
)
want=("$@")
printf '| %-34s | %-6s | %-8s | %-10s | %-9s | %-9s | %-9s | %-10s |\n' row ranks "test acc" "train loss" samples/s "RSS MiB" "stash MiB" "median cos"
printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' ---------------------------------- ------ -------- ---------- --------- --------- --------- ----------
for r in "${rows[@]}"; do
  IFS='|' read -r name ranks sets <<<"$r"
  selected "$name" "${want[@]}" || continue
  args=(); for kv in $sets; do args+=(--set "$kv"); done
  mpi_flags "$ranks"
  out=$dir/run
  rm -rf "$out" "$out.h5"
  log=()
  [ "$ranks" -gt 1 ] && log=(--log "$out.h5")
  if ! mpirun "${MPI_FLAGS[@]}" "$fgpipe" train \
       --config "$config" "${args[@]}" --set stages="$ranks" --set epochs="$epochs" \
       --set print_every=1000000 --out "$out" --summary-json "$out.json" "${log[@]}" >"$out.txt" 2>&1; then
    printf '| %-34s | %-6s | failed: %s |\n' "$name" "$ranks" "$(grep -m1 error "$out.txt" || tail -n 1 "$out.txt")"
    continue
  fi
  /usr/bin/python3 - "$name" "$ranks" "$out.json" "$out.h5" <<'PY'
import json, os, sys
name, ranks, summary, log = sys.argv[1:5]
s = json.load(open(summary))
cos = "-"
if os.path.exists(log):
    import h5py, numpy as np
    c = h5py.File(log, "r")["steps"]["cos_estimate_exact"][:]
    c = c[np.isfinite(c)]
    if len(c): cos = f"{np.median(c):.3f}"
rss = max(s.get("peak_rss_stage", [s["peak_rss_bytes"]])) / 2**20
stash = max(s.get("stash_bytes_stage", [0])) / 2**20
print(f"| {name:<34} | {ranks:<6} | {s['test_acc']:<8.4f} | {s['final_loss']:<10.4f} | "
      f"{s['samples_per_s']:<9.0f} | {rss:<9.0f} | {stash:<9.2f} | {cos:<10} |")
PY
done
