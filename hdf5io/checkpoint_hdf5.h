// Checkpoints in one HDF5 file, written collectively by the pipeline's ranks (parallel HDF5
// over MPI-IO) and read back by tensor name on any layout.
#ifndef FGPIPE_CHECKPOINT_HDF5_H
#define FGPIPE_CHECKPOINT_HDF5_H

#include <mpi.h>

#include "storage.h"

// comm: the ranks of one pipeline (every stage takes part in each save).
Storage checkpoint_hdf5(MPI_Comm comm);
void checkpoint_hdf5_free(Storage *io);

// " (its file system has N MiB free[: disk full])" for the message of a failed write of path
// into buf: HDF5's errors do not carry errno, and a full disk is the usual cause.
const char *hdf5io_space_note(const char *path, char *buf, size_t size);

// The step log (hdf5io/log_hdf5.c): Storage.open_log.
int log_hdf5_open(Storage *io, const char *path, const LogInfo *info, StepLog *out, FgError *err);

#endif
