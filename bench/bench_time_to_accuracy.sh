#!/usr/bin/env bash
# Time to accuracy: every mode trains the main job's model (Fashion-MNIST, 784-768x8-10, steps
# of 4 micro-batches of 32) on the same M-stage pipeline (M ranks), evaluating the test set
# every E steps, for a budget of EPOCHS epochs. Per mode: the training seconds to each target
# accuracy, measured (the sum of loss.csv's step times up to the first evaluation that reaches
# it; only with a core per rank, else n/a) and projected (as many steps of the planned step:
# fgpipe plan --costs of the run's summary, its own timetable timed with its ops' measured
# means, or where ranks share cores with the op costs its start-up timed one stage at a time);
# the samples to the first target, the best accuracy, the measured and the planned step, peak
# RSS of the largest rank and the planned activation memory of the largest stage. "-": the
# budget ended first.
#
#   bp-gpipe, bp-1f1b, bp-zb   the main job's config with mode = bp and that schedule
#   fg                         launch/configs/fashion-mnist-mlp-fg.conf (local losses)
#   fg+bp                      the main job (launch/configs/fashion-mnist-mlp-fgbp.conf)
#
# With fewer cores than ranks the runs are oversubscribed: their accuracy per step is the
# M-stage pipeline's (bp and fg are bitwise the same on any M; fg+bp's timetable is planned
# from op costs timed one stage at a time), their seconds are not, and only the projection
# stands. Curves (accuracy against seconds and samples) go to OUT (default bench/out/tta-mM),
# and tools/fgpipe-report --curves draws them into OUT/time_to_accuracy.png.
#
# usage: bench/bench_time_to_accuracy.sh [M] [EPOCHS] [E] [MODE ...]   (defaults 2 5 47)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
stages=${1:-2}; epochs=${2:-5}; every=${3:-47}
shift $(( $# < 3 ? $# : 3 ))
fgpipe=build/fgpipe
[ -x "$fgpipe" ] || { echo "bench_time_to_accuracy: build first (launch/build.sh)" >&2; exit 2; }
out_dir=${OUT:-bench/out/tta-m$stages}
mkdir -p "$out_dir"
main=launch/configs/fashion-mnist-mlp-fgbp.conf
rows=(
  "bp-gpipe|$main|mode=bp schedule=gpipe|bp-gpipe"
  "bp-1f1b|$main|mode=bp schedule=1f1b|bp-1f1b"
  "bp-zb|$main|mode=bp schedule=zb|bp-zb"
  "fg|launch/configs/fashion-mnist-mlp-fg.conf||fg"
  "fg+bp|$main||fg+bp"
)
targets="0.85 0.88"
measured=$([ "$stages" -le "$(nproc)" ] && echo 1 || echo 0)
want=("$@")
echo "M = $stages stages, $epochs epochs at most, test set every $every steps; $(nproc) cores" \
     "($([ "$measured" = 1 ] && echo "a core per rank" || echo "oversubscribed: measured times n/a"))"
printf '| %-8s | %6s | %6s | %6s | %6s | %7s | %-6s | %7s | %7s | %8s | %5s | %5s |\n' mode "0.85 s" "proj." \
  "0.88 s" "proj." samples "best" "step ms" "planned" "start-up" "RSS" "act."
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for r in "${rows[@]}"; do
  IFS='|' read -r name config sets schedule <<<"$r"
  selected "$name" "${want[@]}" || continue
  args=(); for kv in $sets; do args+=(--set "$kv"); done
  mpi_flags "$stages"
  out=$out_dir/${name/+/p}
  rm -rf "$out"
  if ! mpirun "${MPI_FLAGS[@]}" "$fgpipe" train --config "$config" "${args[@]}" \
       --set stages="$stages" --set epochs="$epochs" --set steps=0 --set eval_every="$every" \
       --set print_every=1000000 --out "$out" --no-checkpoint --summary-json "$out.json" >"$out.txt" 2>&1 ||
     ! "$fgpipe" plan --config "$config" "${args[@]}" --set stages="$stages" --costs "$out.json" \
       --json "$out.startup.json" >"$out.startup.txt" 2>&1 ||
     ! "$fgpipe" plan --config "$config" "${args[@]}" --set stages="$stages" --costs "$out.json" \
       $([ "$measured" = 1 ] && echo --measured) --json "$out.plan.json" >"$out.plan.txt" 2>&1; then
    printf '| %-8s | failed: %s |\n' "$name" "$(grep -m1 -h error "$out.txt" "$out.plan.txt" 2>/dev/null || tail -n 1 "$out.txt")"
    continue
  fi
  /usr/bin/python3 bench/time_to_accuracy.py "$name" "$out" "$targets" "$out.plan.json" \
    "$out.startup.json" "$schedule" "$measured"
done
echo "Seconds are training time (evaluations excluded); proj.: steps to the target x planned: the run's"
echo "timetable timed with its ops' measured means (a core per rank) or with the op costs the run's"
echo "start-up timed one stage at a time (oversubscribed: its ops' times are the OS's sharing);"
echo "start-up: the step planned with those. samples: to the first target. RSS: MiB, largest rank;"
echo "act.: MiB of activations the timetable keeps at most on its largest stage (planned)."
curves=("$out_dir"/*.measured.csv)
[ "$measured" = 1 ] || curves=()
curves+=("$out_dir"/*.projected.csv)
/usr/bin/python3 tools/fgpipe-report --curves "${curves[@]}" --out "$out_dir" >/dev/null &&
  echo "plot: $out_dir/time_to_accuracy.png"
