#!/usr/bin/env bash
# The whole test suite: build, then every ctest test (unit, gradient checks, end-to-end) but
# the long tier; arguments go to ctest instead (-L long: the long tier, -L quick: the quick).
set -euo pipefail
cd "$(dirname "$0")/.."
launch/build.sh
cd build
[ $# -gt 0 ] || set -- -LE long
ctest --output-on-failure -j"$(nproc)" "$@"
