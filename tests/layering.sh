#!/usr/bin/env bash
# The code's layering (docs/core.md): the folders of src/ are layers, bottom first; a file uses
# (calls or includes) only files of its own folder or a lower one, with no circle among them;
# io/, hdf5io/ and mpi/ (main) sit on top, in that order; and the numerical core (src/) includes nothing of MPI, HDF5,
# CUDA or NCCL, nor a header of the folders that plug into it; and the engine's features are
# tested no more than their budget (tools/feature-budget --check, issue 51).
#
# usage: layering.sh ROOT
set -u
root=$(realpath "$1")
layers="math stage schedule input engine run"
passed=0 failed=0
verdict() {
  if [ -z "$2" ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1: $2"; failed=$((failed + 1)); fi
}
dirs=$(for l in $layers; do echo "$root/src/$l"; done; echo "$root/io $root/hdf5io $root/mpi")
out=$(/usr/bin/python3 "$root/tools/fgpipe-import-graph" --layers $dirs 2>&1)
rc=$?
what="no circle, no climb among src/{${layers// /,}}, io, hdf5io, mpi"
[ $rc -eq 0 ] && verdict "$what ($(tail -n 1 <<<"$out"))" "" ||
  verdict "$what" "$(grep -E '^(circle|climbs):|^  ' <<<"$out" | tr '\n' ' ')$( [ $rc -gt 1 ] && echo "$out")"
stray=$(cd "$root/src" && ls *.[ch] 2>/dev/null; for d in */; do [[ " $layers " == *" ${d%/} "* ]] || echo "$d"; done)
verdict "every file of src/ sits in a layer folder ($layers)" "$stray"
mine=$(cd "$root" && ls mpi/*.h io/*.h hdf5io/*.h cuda/*.h 2>/dev/null | xargs -n1 basename | sed "s/\.h$//" | tr '\n' '|')
bad=$(grep -rnE "#include [<\"](mpi|hdf5|H5[A-Za-z]*|cuda[a-z_]*|cublas[A-Za-z]*|nccl|${mine%|})\.h[>\"]" "$root"/src --include='*.[ch]' || true)
verdict "src/ includes no MPI, HDF5, CUDA, NCCL nor mpi/, io/, hdf5io/, cuda/ headers" "$bad"
budget=$(/usr/bin/python3 "$root/tools/feature-budget" --check 2>&1)
[ $? -eq 0 ] && verdict "engine and stage feature tests within their budget (tools/feature-budget --check)" "" ||
  verdict "engine and stage feature tests within their budget" "$(grep -v '^feature budget' <<<"$budget" | tr '\n' ';')"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
