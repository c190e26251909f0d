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
#   fg+bp-all                  the main job with every micro-batch backpropagated a step late
#                              (select = 4 = micro_batches, lag = 1: no fill/drain bubble)
#
# With fewer cores than ranks the runs are oversubscribed: their accuracy per step is the
# M-stage pipeline's (bp and fg are bitwise the same on any M; fg+bp's timetable is planned
# from op costs timed one stage at a time), their seconds are not, and only the projection
# stands. Curves (accuracy against seconds and samples) go to OUT (default bench/out/tta-MODEL-mM),
# and tools/fgpipe-report --curves draws them into OUT/time_to_accuracy.png.
#
# MODEL=gpt races the byte-level GPT instead (launch/configs/gpt-kjv.conf on the KJV corpus, the
# main job's fg+bp as launch/train-gpt.sh runs it, fg with activity tangents at lr 3e-4) to a
# validation loss of 2.0 and 1.7 nats per byte; its budget is in steps, not epochs.
#
# usage: bench/bench_time_to_accuracy.sh [M] [EPOCHS] [E] [MODE ...]   (defaults 2 5 47)
#        MODEL=gpt bench/bench_time_to_accuracy.sh [M] [STEPS] [E] [MODE ...]   (2 2000 100)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
model=${MODEL:-mlp}
case $model in
  mlp) stages=${1:-2}; budget=(--set epochs="${2:-5}" --set steps=0); every=${3:-47}
       main=launch/configs/fashion-mnist-mlp-fgbp.conf fg=launch/configs/fashion-mnist-mlp-fg.conf
       metric=accuracy targets="0.85 0.88" fg_sets="" fgbp_sets="" data=() ;;
  gpt) stages=${1:-2}; budget=(--set steps="${2:-2000}"); every=${3:-100}
       main=launch/configs/gpt-kjv.conf fg=$main metric=val_loss targets="2.0 1.7"
       fg_sets="mode=fg perturb=activity lr=0.0003"
       fgbp_sets="mode=fg+bp perturb=activity estimator=mix shrink=0"
       data=(--set text_file="$(launch/text-corpus.sh)") ;;
  *) echo "bench_time_to_accuracy: MODEL=$model, expected mlp or gpt" >&2; exit 2 ;;
esac
shift $(( $# < 3 ? $# : 3 ))
fgpipe=build/fgpipe
[ -x "$fgpipe" ] || { echo "bench_time_to_accuracy: build first (launch/build.sh)" >&2; exit 2; }
out_dir=${OUT:-bench/out/tta-$model-m$stages}
mkdir -p "$out_dir"
rows=(
  "bp-gpipe|$main|mode=bp schedule=gpipe|bp-gpipe"
  "bp-1f1b|$main|mode=bp schedule=1f1b|bp-1f1b"
  "bp-zb|$main|mode=bp schedule=zb|bp-zb"
  "fg|$fg|$fg_sets|fg"
  "fg+bp|$main|$fgbp_sets|fg+bp"
  "fg+bp-all|$main|$fgbp_sets select=4 lag=1|fg+bp"
)
measured=$([ "$stages" -le "$(nproc)" ] && echo 1 || echo 0)
want=("$@")
echo "$model: M = $stages stages, at most ${budget[1]}, evaluated every $every steps; $(nproc) cores" \
     "($([ "$measured" = 1 ] && echo "a core per rank" || echo "oversubscribed: measured times n/a"))"
read -r first second <<<"$targets"
printf '| %-8s | %6s | %6s | %6s | %6s | %7s | %-6s | %7s | %7s | %8s | %5s | %5s |\n' mode "$first s" "proj." \
  "$second s" "proj." samples "best" "step ms" "planned" "start-up" "RSS" "act."
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for r in "${rows[@]}"; do
  IFS='|' read -r name config sets schedule <<<"$r"
  selected "$name" "${want[@]}" || continue
  args=(); for kv in $sets; do args+=(--set "$kv"); done
  mpi_flags "$stages"
  out=$out_dir/${name/+/p}
  rm -rf "$out"
  if ! mpirun "${MPI_FLAGS[@]}" "$fgpipe" train --config "$config" "${args[@]}" "${data[@]}" \
       --set stages="$stages" "${budget[@]}" --set eval_every="$every" \
       --set print_every=1000000 --out "$out" --no-checkpoint --summary-json "$out.json" >"$out.txt" 2>&1 ||
     ! "$fgpipe" plan --config "$config" "${args[@]}" "${data[@]}" --set stages="$stages" \
       --costs "$out.json" --json "$out.startup.json" >"$out.startup.txt" 2>&1 ||
     ! "$fgpipe" plan --config "$config" "${args[@]}" "${data[@]}" --set stages="$stages" --costs "$out.json" \
       $([ "$measured" = 1 ] && echo --measured) --json "$out.plan.json" >"$out.plan.txt" 2>&1; then
    printf '| %-8s | failed: %s |\n' "$name" "$(grep -m1 -h error "$out.txt" "$out.plan.txt" 2>/dev/null || tail -n 1 "$out.txt")"
    continue
  fi
  /usr/bin/python3 bench/time_to_accuracy.py "$name" "$out" "$targets" "$out.plan.json" \
    "$out.startup.json" "$schedule" "$measured" "$metric"
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
