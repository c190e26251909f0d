#!/usr/bin/env bash
# The main job: build, then train a 9-layer MLP on Fashion-MNIST as a 4-stage pipeline (one MPI
# rank per stage) with forward gradients corrected by backprop in the pipeline bubbles
# (launch/configs/fashion-mnist-mlp-fgbp.conf: fg+bp with activity perturbation and the mix
# estimator at shrink 0; select=-1 fills the stages' idle time or backprops every micro-batch at
# a lag, whichever gives more exact samples per second, and prints its choice and how many
# micro-batches each stage backprops). The last stage prints progress and the final test
# accuracy; out/example/ gets the resolved config, the loss per step, a summary and the
# timeline of the last step (out/example/trace.json: open it in Perfetto).
# Extra arguments go to `fgpipe train`, e.g. --set epochs=5 or --set mode=bp.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/build.sh
mkdir -p out/example
. launch/lib.sh
mpi_flags 4
exec mpirun "${MPI_FLAGS[@]}" build/fgpipe train --config launch/configs/fashion-mnist-mlp-fgbp.conf \
  --out out/example --summary-json out/example/summary.json --trace out/example/trace.json "$@"
