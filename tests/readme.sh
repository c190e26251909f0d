#!/usr/bin/env bash
# README.md and docs/ as a reader follows them: the README's code map names every source file
# under src/, io/, hdf5io/, mpi/ and cuda/ and docs/code-map.md is tools/code-map's output; every
# relative link and anchor, and every section named in prose ("docs/PAGE.md, "Title""), exists;
# every command the README shows starts with a script or program that exists. The commands
# themselves run with tools/readme-commands (minutes: not in ctest).  usage: readme.sh ROOT
root=${1:-$(dirname "$0")/..}
rc=0
"$root/tools/code-map" --check || rc=1
"$root/tools/check-docs" || rc=1
exit $rc
