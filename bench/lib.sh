# Shared by the benchmark scripts that run one training per table row, sourced after
# `cd` to the repository root. mpi_flags comes from launch/lib.sh.
. launch/lib.sh

# selected NAME [WANT ...]: true when no names are wanted or NAME is one of them.
selected() {
  local name=$1 w; shift
  [ $# -eq 0 ] && return 0
  for w in "$@"; do [ "$w" = "$name" ] && return 0; done
  return 1
}
