// NodeShare (src/stage/layer_stream.h) over MPI-3 shared memory: the ranks of one node
// (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) split by stage; the lowest replica of a stage on
// a node is that stage's I/O rank there; the block is an MPI_Win_allocate_shared window.
#ifndef FGPIPE_NODE_SHARE_MPI_H
#define FGPIPE_NODE_SHARE_MPI_H

#include <mpi.h>

#include "layer_stream.h"

// world: the grid of transport_mpi_create (rank r: stage r % stages of replica r / stages).
int node_share_mpi_create(MPI_Comm world, int stages, NodeShare *out, FgError *err);
void node_share_mpi_destroy(NodeShare *n);

#endif
