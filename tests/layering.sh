#!/usr/bin/env bash
# The code's layering (docs/core.md): no circle among the C files of the host folders (a file
# that uses another's functions sits above it), and the numerical core (src/) includes nothing
# of MPI, HDF5, CUDA or NCCL, nor a header of the folders that plug into it.
#
# usage: layering.sh ROOT
set -u
root=$(realpath "$1")
passed=0 failed=0
verdict() {
  if [ -z "$2" ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1: $2"; failed=$((failed + 1)); fi
}
out=$(/usr/bin/python3 "$root/tools/fgpipe-import-graph" "$root/src" "$root/mpi" "$root/io" "$root/hdf5io" 2>&1)
rc=$?
[ $rc -eq 0 ] && verdict "no circle among the files of src, mpi, io, hdf5io ($(tail -n 1 <<<"$out"))" "" ||
  verdict "no circle among the files of src, mpi, io, hdf5io" "$(grep circle: <<<"$out" | tr '\n' ' ')$( [ $rc -gt 1 ] && echo "$out")"
mine=$(cd "$root" && ls mpi/*.h io/*.h hdf5io/*.h cuda/*.h 2>/dev/null | xargs -n1 basename | sed "s/\.h$//" | tr '\n' '|')
bad=$(grep -nE "#include [<\"](mpi|hdf5|H5[A-Za-z]*|cuda[a-z_]*|cublas[A-Za-z]*|nccl|${mine%|})\.h[>\"]" "$root"/src/*.[ch] || true)
verdict "src/ includes no MPI, HDF5, CUDA, NCCL nor mpi/, io/, hdf5io/, cuda/ headers" "$bad"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
