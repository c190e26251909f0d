#!/usr/bin/env bash
# The main job: build, then train a 9-layer MLP on Fashion-MNIST for one epoch as a 4-stage
# pipeline (one MPI rank per stage), three ways on the same pipeline, and print them side by side
# (tools/fgpipe-compare): what each stage ran in its bubbles, time, test accuracy, activation
# memory per stage, and the verdict those numbers give. About 2.5 minutes on a 2-core machine.
#   1. fg+bp, the method (launch/configs/fashion-mnist-mlp-fgbp.conf with shrink = 0.05): op F
#      carries a forward gradient (activity perturbation, one tangent) through the pipeline, and
#      the stages backprop micro-batches in their idle time (Bi, Bw ops in the bubbles, at a lag
#      of up to 2 steps); the step's gradient is 0.95 c + 0.05 fg (mix). Printed in full.
#      (At shrink = 0, the config's own, op F carries no tangent, and select = -1 weighs filling
#      the bubbles against backpropagating every micro-batch: on this pipeline it picks bp-zb's
#      timetable, and the run is bp-zb bit for bit; `--set shrink=0` prints that choice.)
#   2. bp on bp-zb's zero-bubble timetable, the baseline.
#   3. fg alone: forward gradients with local losses (launch/configs/fashion-mnist-mlp-fg.conf's
#      estimator: activity perturbation, 32 local heads per hidden layer; 8 tangents, not its 16,
#      to keep the job short: 0.855 against 0.860 after 5 epochs in docs/results/accuracy.md).
# out/example/{fg+bp,bp,fg}/ get config.txt, loss.csv, summary.json, trace.json (the planned and
# measured timeline of the last step: open it in Perfetto) and checkpoint.h5.
# Extra arguments go to every run, e.g. --set epochs=5 (5 x as long).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/build.sh >/dev/null
. launch/lib.sh
mpi_flags 4
train() {  # train NAME ARGS...: one run into out/example/NAME
  local name=$1; shift
  mkdir -p "out/example/$name"
  mpirun "${MPI_FLAGS[@]}" build/fgpipe train --config launch/configs/fashion-mnist-mlp-fgbp.conf \
    --out "out/example/$name" --summary-json "out/example/$name/summary.json" \
    --trace "out/example/$name/trace.json" "$@"
}
echo "== fg+bp, the method: a forward gradient through the pipeline, backprop in its bubbles"
train fg+bp --set shrink=0.05 "$@"
echo "== bp (zero bubble), the baseline: its result line"
train bp --set mode=bp "$@" 2>out/example/bp.log | grep "^result:"
echo "== fg alone (local losses, 8 tangents): its result line"
train fg --set mode=fg --set local_groups=32 --set tangents=8 "$@" 2>out/example/fg.log | grep "^result:"
echo "== side by side"
tools/fgpipe-compare fg+bp=out/example/fg+bp/summary.json bp=out/example/bp/summary.json \
  fg=out/example/fg/summary.json
