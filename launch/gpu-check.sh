#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds fgpipe with the CUDA backend, runs the gpu-labelled
# tests (each op and whole models against the CPU, 1 vs 2 stages on the GPU, NCCL against staged
# messages with 2 or more GPUs) and prints the GPU benchmark tables (the NCCL one needs 2 GPUs).
# usage: launch/gpu-check.sh [ROWS_PER_MICROBATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "gpu-check: nvcc not on PATH" >&2; exit 2; }
nvidia-smi -L || { echo "gpu-check: no GPU visible (nvidia-smi -L failed)" >&2; exit 2; }
launch/build.sh
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd build && ctest -L gpu --output-on-failure)
build/fgpipe-bench-cuda "${1:-256}"
