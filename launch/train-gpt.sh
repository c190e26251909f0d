#!/usr/bin/env bash
# The GPT job: build, make the default corpus (the King James Bible, launch/text-corpus.sh),
# then train the default byte-level GPT (docs/gpt.md: 4 blocks, 128 wide, ctx 128) as a
# 4-stage pipeline (one MPI rank per stage) with forward gradients corrected by backprop in
# the bubbles (fg+bp with its defaults: activity perturbation and the mix estimator at
# shrink 0, the best fg+bp measured: docs/gpt.md, docs/pipeline.md "Defaults"), print
# progress and the validation loss per byte, and end with a sample generated from the
# checkpoint. out/gpt/ gets config.txt, loss.csv, summary.json and
# checkpoint.h5. Extra arguments go to `fgpipe train`, e.g. --set steps=200 or --set mode=bp.
# Long: about 18 minutes on a 2-core machine (issue 51, 2026-11-27); the run prints an ETA line
# once its first 5 s of steps have run, and progress every 100 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/build.sh
corpus=$(launch/text-corpus.sh)
mkdir -p out/gpt
. launch/lib.sh
mpi_flags 4
echo "train-gpt: about 18 minutes on a 2-core machine; an ETA follows the first steps" >&2
mpirun "${MPI_FLAGS[@]}" build/fgpipe train --config launch/configs/gpt-kjv.conf \
  --set text_file="$corpus" --set stages=4 --set mode=fg+bp \
  --out out/gpt --summary-json out/gpt/summary.json "$@"
echo "sample (fgpipe generate --checkpoint out/gpt/checkpoint.h5 --prompt 'And God said'):"
build/fgpipe generate --checkpoint out/gpt/checkpoint.h5 --prompt "And God said" --tokens 200 \
  --temperature 0.8 --top-k 40 --seed 1
