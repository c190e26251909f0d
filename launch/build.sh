#!/usr/bin/env bash
# Installs missing packages, then configures and builds fgpipe into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
