#!/usr/bin/env bash
# Time to accuracy: every mode trains the main job's model (Fashion-MNIST, 784-1024-1024-1024-10,
# steps of 4 micro-batches of 32) on the same M-stage pipeline (M ranks), evaluating the test
# set every E steps, for a budget of EPOCHS epochs. Per mode: the training seconds and samples
# to reach each target accuracy (training time only: the sum of loss.csv's step times up to the
# evaluation that first reaches it; "-" when the budget ends first), the best accuracy, the
# median step, and peak RSS and kept activations of the largest stage.
#
#   bp-gpipe, bp-1f1b   the main job's config with mode = bp
#   fg                  launch/configs/fashion-mnist-mlp-fg.conf (local losses)
#   fg+bp               the main job (launch/configs/fashion-mnist-mlp-fgbp.conf)
#
# usage: bench/bench_time_to_accuracy.sh [M] [EPOCHS] [E] [MODE ...]
#   defaults M 2, EPOCHS 3, E 47 (a tenth of an epoch). Runs M ranks on this machine's cores:
#   with fewer cores than ranks the times are those of an oversubscribed machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
stages=${1:-2}; epochs=${2:-3}; every=${3:-47}
shift $(( $# < 3 ? $# : 3 ))
fgpipe=build/fgpipe
[ -x "$fgpipe" ] || { echo "bench_time_to_accuracy: build first (launch/build.sh)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
main=launch/configs/fashion-mnist-mlp-fgbp.conf
rows=(
  "bp-gpipe|$main|mode=bp schedule=gpipe"
  "bp-1f1b|$main|mode=bp schedule=1f1b"
  "fg|launch/configs/fashion-mnist-mlp-fg.conf|"
  "fg+bp|$main|"
)
targets="0.85 0.88"
want=("$@")
echo "M = $stages stages, $epochs epochs at most, test set every $every steps; $(nproc) cores"
printf '| %-8s | %-12s | %-12s | %-8s | %-8s | %-9s | %-7s | %-9s |\n' mode "to 0.85 (s)" "to 0.88 (s)" \
  "samples" "best acc" "step ms" "RSS MiB" "stash MiB"
printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' -------- ------------ ------------ -------- \
  -------- --------- ------- ---------
for r in "${rows[@]}"; do
  IFS='|' read -r name config sets <<<"$r"
  selected "$name" "${want[@]}" || continue
  args=(); for kv in $sets; do args+=(--set "$kv"); done
  mpi_flags "$stages"
  out=$dir/$name
  if ! mpirun "${MPI_FLAGS[@]}" "$fgpipe" train --config "$config" "${args[@]}" \
       --set stages="$stages" --set epochs="$epochs" --set steps=0 --set eval_every="$every" \
       --set print_every=1000000 --out "$out" --summary-json "$out.json" >"$out.txt" 2>&1; then
    printf '| %-8s | failed: %s |\n' "$name" "$(grep -m1 error "$out.txt" || tail -n 1 "$out.txt")"
    continue
  fi
  /usr/bin/python3 - "$name" "$out" "$targets" <<'PY'
import csv, json, re, sys
name, out, targets = sys.argv[1], sys.argv[2], [float(t) for t in sys.argv[3].split()]
s = json.load(open(out + ".json"))
seconds = {}
total = 0.0
for row in csv.DictReader(open(out + "/loss.csv")):
    total += float(row["seconds"])
    seconds[int(row["step"])] = total
evals = [(int(m.group(1)), float(m.group(2))) for m in
         re.finditer(r"eval step (\d+): test loss \S+\s+test accuracy (\S+)", open(out + ".txt").read())]
evals.append((s["steps"] - 1, s["test_acc"]))  # the final evaluation
batch = s["micro_batch"] * s["micro_batches"] * s.get("replicas", 1)
cells, first = [], None
for t in targets:
    hit = next(((step, seconds[step]) for step, acc in evals if acc >= t and step in seconds), None)
    cells.append(f"{hit[1]:.1f}" if hit else "-")
    if hit and first is None: first = hit[0]
samples = f"{(first + 1) * batch}" if first is not None else "-"
best = max(acc for _, acc in evals)
rss = max(s.get("peak_rss_stage", [s["peak_rss_bytes"]])) / 2**20
stash = max(s.get("stash_bytes_stage", [0])) / 2**20
print(f"| {name:<8} | {cells[0]:<12} | {cells[1]:<12} | {samples:<8} | {best:<8.4f} | "
      f"{1e3 * s['step_seconds']:<9.1f} | {rss:<7.0f} | {stash:<9.2f} |")
PY
done
echo "samples: to the first target reached. Times are training seconds (evaluations excluded)."
