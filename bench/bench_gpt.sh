#!/usr/bin/env bash
# GPT benchmark: the default byte-level GPT (docs/gpt.md, launch/configs/gpt-kjv.conf: 4 x 128,
# ctx 128, steps of 16 sequences) on the KJV corpus, trained for STEPS steps in each mode with
# the same data: bp, fg with weight (full and low-rank) and activity perturbation on 1 rank,
# fg+bp on 4 stages.
# Prints one table: tokens/s, peak RSS of the largest rank, final train loss, validation loss
# (nats and bits per byte) and next-byte accuracy over the whole validation split. Each row's
# options are on top of the config, so a row can be rerun by hand. The row "torch bp" is the
# same model and schedule in PyTorch (bench/torch_gpt.py, when python3-torch is installed), the
# mainstream-framework reference for the bp row, on the same threads.
#
# usage: bench/bench_gpt.sh [STEPS] [ROW ...]   (default 2000 steps, the config's; ROW: names)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
steps=${1:-2000}; shift || true
fgpipe=build/fgpipe config=launch/configs/gpt-kjv.conf
[ -x "$fgpipe" ] || { echo "bench_gpt: build first (launch/build.sh)" >&2; exit 2; }
corpus=$(launch/text-corpus.sh)
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
rows=(
  "bp|1|mode=bp schedule=gpipe"
  "fg weight K=1|1|mode=fg perturb=weight lr=0.0001"
  "fg weight low-rank r=1|1|mode=fg perturb=weight tangent_rank=1 lr=0.0001"
  "fg weight low-rank r=8|1|mode=fg perturb=weight tangent_rank=8 lr=0.0001"
  "fg activity K=1|1|mode=fg perturb=activity lr=0.0003"
  "fg+bp activity mix shrink=0|4|mode=fg+bp perturb=activity estimator=mix shrink=0"
  "fg+bp weight cv|4|mode=fg+bp perturb=weight estimator=cv lr=0.0001"
  "torch bp|1|"
)
want=("$@")

table_row() {  # table_row NAME RANKS SUMMARY_JSON
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
name, ranks, summary = sys.argv[1:4]
s = json.load(open(summary))
rss = max(s.get("peak_rss_stage", [s["peak_rss_bytes"]])) / 2**20
print(f"| {name:<30} | {ranks:<5} | {s['tokens_per_s']:<8.0f} | {rss:<7.0f} | {s['final_loss']:<10.4f} | "
      f"{s['val_loss']:<8.4f} | {s['val_bits_per_byte']:<9.4f} | {s['test_acc']:<8.4f} |")
PY
}
printf '| %-30s | %-5s | %-8s | %-7s | %-10s | %-8s | %-9s | %-8s |\n' row ranks tokens/s "RSS MiB" "train loss" "val nats" "bits/byte" "val acc"
printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' ------------------------------ ----- -------- ------- ---------- -------- --------- --------
for r in "${rows[@]}"; do
  IFS='|' read -r name ranks sets <<<"$r"
  selected "$name" "${want[@]}" || continue
  out=$dir/run; rm -rf "$out"
  if [ "$name" = "torch bp" ]; then
    if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
      printf '| %-30s | skipped: no PyTorch (apt-get install python3-torch) |\n' "$name"; continue
    fi
    bench/torch_gpt.py "$corpus" --steps "$steps" --threads "$(nproc)" >"$out.json"  # one rank's threads
    table_row "$name" 1 "$out.json"; continue
  fi
  args=(); for kv in $sets; do args+=(--set "$kv"); done
  mpi_flags "$ranks"
  if ! mpirun "${MPI_FLAGS[@]}" "$fgpipe" train \
       --config "$config" --set text_file="$corpus" "${args[@]}" --set stages="$ranks" \
       --set steps="$steps" --set eval_every=0 --set print_every=1000000 --no-checkpoint \
       --out "$out" --summary-json "$out.json" >"$out.txt" 2>&1; then
    printf '| %-30s | %-5s | failed: %s |\n' "$name" "$ranks" "$(grep -m1 error "$out.txt" || tail -n 1 "$out.txt")"
    continue
  fi
  table_row "$name" "$ranks" "$out.json"
done
