# Shared by the launch and bench scripts, sourced from the repository root.

# mpi_flags RANKS: into the array MPI_FLAGS, mpirun's flags for RANKS ranks on this machine's
# cores (threads split among them, oversubscribed when there are fewer cores); as root, lets
# Open MPI run (it refuses root unless told twice). One machine: shared memory alone (Open MPI
# otherwise probes its network transports at every start, most of a small run's start-up).
mpi_flags() {
  local ranks=$1 threads=$(( $(nproc) / $1 ))
  [ "$threads" -ge 1 ] || threads=1
  MPI_FLAGS=(-np "$ranks" --bind-to none -x OMP_NUM_THREADS=$threads --mca pml ob1 --mca btl self,vader)
  [ "$ranks" -gt "$(nproc)" ] && MPI_FLAGS+=(--oversubscribe)
  [ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  return 0
}
