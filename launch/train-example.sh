#!/usr/bin/env bash
# The main job: build, then train the default MLP on Fashion-MNIST and print the result.
# Extra arguments go to `fgpipe train`, e.g. --set mode=fg --set epochs=1.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/build.sh
mkdir -p out
exec build/fgpipe train --config launch/configs/fashion-mnist-mlp.conf --out out/example \
  --summary-json out/example/summary.json "$@"
