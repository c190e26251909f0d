#!/usr/bin/env bash
# The whole test suite: build, then every ctest test (unit, gradient checks, end-to-end).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
