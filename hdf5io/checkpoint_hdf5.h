// Checkpoints in one HDF5 file, written collectively by the pipeline's ranks (parallel HDF5
// over MPI-IO) and read back by tensor name on any layout.
#ifndef FGPIPE_CHECKPOINT_HDF5_H
#define FGPIPE_CHECKPOINT_HDF5_H

#include <mpi.h>

#include "checkpoint.h"

// comm: the ranks of one pipeline (every stage takes part in each save).
CheckpointIO checkpoint_hdf5(MPI_Comm comm);
void checkpoint_hdf5_free(CheckpointIO *io);

#endif
