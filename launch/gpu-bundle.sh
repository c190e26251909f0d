#!/usr/bin/env bash
# Runs launch/gpu-check.sh's tests and benchmarks on a GPU machine that cannot build fgpipe
# (no parallel HDF5, no cmocka, no network): build here, carry the bundle, unpack there.
#   here:  launch/gpu-bundle.sh pack     builds build-gpu/ (sm_90, no -march=native, OpenBLAS) and fills
#                                        .gpu/: binaries, ctest files, the shared libraries
#                                        the other machine may lack, Fashion-MNIST
#   there: launch/gpu-bundle.sh unpack   links build-gpu, build and /work/main to this tree,
#                                        keeps only the carried libraries the machine lacks,
#                                        finds cuBLAS and NCCL, and prints the env to source
#   then:  eval "$(launch/gpu-bundle.sh unpack)"; FGPIPE_PREBUILT=1 launch/gpu-check.sh
# llm.c's train_gpt2cu (bench/bench_gpu_llmc.sh's anchor) is never built or packed by fgpipe:
# one built elsewhere sits in the ignored .gpu-llmc/ and is carried with .gpu/; unpack then
# exports LLMC_BIN=.gpu-llmc/train_gpt2cu (no binary there: the bench skips llm.c and says so).
# Both trees must sit at the same path for ctest (its files hold absolute paths): unpack links
# the path pack was run at to the tree it runs in.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
case "${1:-}" in
pack)
  # OpenBLAS for the CPU's GEMMs: oneDNN's library (38 MB) would not fit the 64 MiB a call carries
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFGPIPE_CUDA=ON -DFGPIPE_NATIVE=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DFGPIPE_CPU_GEMM=openblas >/dev/null
  cmake --build build-gpu -j"$(nproc)"
  rm -rf .gpu && mkdir -p .gpu/lib .gpu/fashion-mnist
  # the build tree without objects: executables, the module, ctest's files
  (cd build-gpu && find . -name CMakeFiles -prune -o -type f \( -perm -u+x -o -name '*.so' \
     -o -name 'CTestTestfile.cmake' \) -print0 | tar --null -T - -cf -) | (mkdir -p .gpu/build-gpu && tar -xf - -C .gpu/build-gpu)
  # libraries outside the C runtime, MPI and CUDA (the machine brings its own of those)
  for f in .gpu/build-gpu/fgpipe .gpu/build-gpu/libfgpipe_cuda.so .gpu/build-gpu/tests/*; do
    [ -x "$f" ] && ldd "$f" 2>/dev/null
  done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+|libmpi|libopen-pal|libopen-rte|libhwloc|libevent_[a-z]*|libudev|libssl|libcrypto|libgnutls|libp11-kit|libgmp|libnettle|libhogweed|libopenblas|libgfortran|libquadmath|libgomp|libz|libzstd|libcuda|libcudart|libcublas|libcublasLt|libnccl)[.-]' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
  # Fashion-MNIST with its first 20000 training images (the whole set does not fit the 64 MiB
  # a call carries); the GPU tests compare devices and cuts, not accuracy
  /usr/bin/python3 - /usr/share/datasets/fashion-mnist .gpu/fashion-mnist 20000 <<'PY'
import gzip, shutil, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for kind, item in (("images-idx3", 784), ("labels-idx1", 1)):
    raw = gzip.open(f"{src}/train-{kind}-ubyte.gz").read()
    head = 16 if item > 1 else 8
    out = raw[:4] + struct.pack(">I", n) + raw[8:head] + raw[head:head + n * item]
    with gzip.open(f"{dst}/train-{kind}-ubyte.gz", "wb") as f: f.write(out)
    shutil.copy(f"{src}/t10k-{kind}-ubyte.gz", dst)
PY
  mkdir -p .gpu/data && cp "$(launch/text-corpus.sh)" .gpu/data/kjv.txt  # the GPT's tests' corpus
  du -sh .gpu
  ;;
unpack)
  [ -d .gpu/build-gpu ] || { echo "gpu-bundle: no .gpu/build-gpu: run pack here first" >&2; exit 2; }
  packed=$(sed -n 's/^# Build directory: \(.*\)\/build-gpu$/\1/p' .gpu/build-gpu/CTestTestfile.cmake)
  ln -sfn "$root/.gpu/build-gpu" build-gpu; ln -sfn "$root/.gpu/build-gpu" build
  if [ -n "$packed" ] && [ "$packed" != "$root" ]; then
    if [ -e "$packed" ]; then echo "gpu-bundle: $packed exists: ctest will not find the build" >&2
    else mkdir -p "$(dirname "$packed")"; ln -s "$root" "$packed"; fi
  fi
  [ -e /usr/share/datasets/fashion-mnist ] ||
    { mkdir -p /usr/share/datasets && ln -s "$root/.gpu/fashion-mnist" /usr/share/datasets/fashion-mnist; }
  # a carried library the machine has already is dropped: its own build matches its MPI and libc
  for lib in .gpu/lib/*; do
    if ldconfig -p | grep -q "^[[:space:]]$(basename "$lib") "; then rm -f "$lib"; fi
  done
  libs=$root/.gpu/lib
  for name in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
    ldconfig -p | grep -q "^[[:space:]]$name " && continue
    hit=$(find /usr/local/cuda*/ /usr/lib /opt -name "$name" 2>/dev/null | head -n 1)
    [ -n "$hit" ] && libs=$libs:$(dirname "$hit")
  done
  [ -e data ] || ln -s .gpu/data data
  # the test scripts' checks use /usr/bin/python3 with numpy and h5py: borrow a venv's packages
  # (a link would not do: Python finds its venv from the path it was started by)
  venv=/opt/torch/.venv
  if ! /usr/bin/python3 -c 'import numpy, h5py' 2>/dev/null && [ -d "$venv" ]; then
    site=$(echo "$venv"/lib/python3*/site-packages) real=$(readlink -f "$venv/bin/python3")
    [ "$real" = /usr/bin/python3 ] && real=$(readlink -f /usr/bin/python3)
    # shellcheck disable=SC2016  # the wrapper expands them when it runs
    printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$site" "$real" >/tmp/python3
    chmod +x /tmp/python3 && mv /tmp/python3 /usr/bin/python3
  fi
  echo "export LD_LIBRARY_PATH=$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  if [ -f .gpu-llmc/train_gpt2cu ]; then
    chmod +x .gpu-llmc/train_gpt2cu && echo "export LLMC_BIN=$root/.gpu-llmc/train_gpt2cu"
  fi
  ;;
*) echo "usage: launch/gpu-bundle.sh pack|unpack" >&2; exit 2 ;;
esac
