#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds fgpipe with the CUDA backend, runs every gpu-labelled
# test (each op, the GPT's, Llama's and LoRA's layers and whole models against the CPU
# (test_cuda_gpt, test_cuda_llama, test_cuda_lora), the BF16 kernels' bits against the CPU's
# and the GEMMs reading the weights' BF16 copy (test_cuda_bf16), tf32 and bf16 bounds, 1 vs 2
# stages on the GPU for the MLP and the GPT, LoRA end to end (gpu_lora), out of core, NCCL
# against staged messages with 2
# or more GPUs) and prints the GPU benchmark tables: the MLP's (fgpipe-bench-cuda; the NCCL
# table needs 2 GPUs) and the GPT's (bench/bench_gpu_gpt.sh: tokens/s, MFU, peak GPU memory
# per model, mode and precision) and fgpipe beside llm.c on GPT-2 124M's real shape
# (bench/bench_gpu_llmc.sh; llm.c's rows need LLMC_BIN, a train_gpt2cu built elsewhere), and
# a stage streaming its layers from flash against max(compute, flash, PCIe) (bench/
# bench_gpu_stream.sh; OLD=another fgpipe adds its rows). The tests' failures do not stop the
# benchmarks; the exit status is the tests'.
# usage: launch/gpu-check.sh [ROWS_PER_MICROBATCH] [GPT_STEPS] [LLMC_STEPS]
#   FGPIPE_PREBUILT=1 skips the build (a machine that cannot build: launch/gpu-bundle.sh);
#   PARTS="tests mlp gpt llmc stream" (the default: all) picks what runs; MODELS, PRECISIONS
#   as bench_gpu_gpt.sh takes them
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "gpu-check: nvcc not on PATH" >&2; exit 2; }
nvidia-smi -L || { echo "gpu-check: no GPU visible (nvidia-smi -L failed)" >&2; exit 2; }
[ -n "${FGPIPE_PREBUILT:-}" ] || launch/build.sh
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rc=0 parts=" ${PARTS:-tests mlp gpt llmc stream} "
part() { [[ $parts == *" $1 "* ]] && echo "== gpu-check: $1 ($(date -u +%T))"; }
if part tests; then (cd build && ctest -L gpu --output-on-failure) || rc=$?; fi
if part stream; then bench/bench_gpu_stream.sh || echo "gpu-check: bench_gpu_stream.sh FAILED" >&2; fi
if part mlp; then build/fgpipe-bench-cuda "${1:-256}"; fi
if part gpt; then bench/bench_gpu_gpt.sh "${2:-10}"; fi
if part llmc; then bench/bench_gpu_llmc.sh "${3:-8}" || echo "gpu-check: bench_gpu_llmc.sh: some rows FAILED" >&2; fi
exit $rc
