# Shared by the benchmark scripts that run one training per table row, sourced after
# `cd` to the repository root.

# selected NAME [WANT ...]: true when no names are wanted or NAME is one of them.
selected() {
  local name=$1 w; shift
  [ $# -eq 0 ] && return 0
  for w in "$@"; do [ "$w" = "$name" ] && return 0; done
  return 1
}

# mpi_flags RANKS: into the array MPI_FLAGS, mpirun's flags for RANKS ranks sharing this
# machine's cores (threads split among them, oversubscribed when there are fewer cores).
mpi_flags() {
  local ranks=$1 threads=$(( $(nproc) / $1 ))
  [ "$threads" -ge 1 ] || threads=1
  MPI_FLAGS=(-np "$ranks" --bind-to none -x OMP_NUM_THREADS=$threads)
  [ "$ranks" -gt "$(nproc)" ] && MPI_FLAGS+=(--oversubscribe)
  return 0
}
