// Which links of a GPU run carry device buffers through NCCL (cuda/transport_nccl.cu): a link
// does when all of its ranks are on distinct GPUs (NCCL cannot connect two ranks on one GPU);
// the others go through host memory (transport_staged). The environment variable
// FGPIPE_TRANSPORT, as world rank 0 has it, can ask otherwise:
//   auto    (default) as above
//   nccl    NCCL on every link, or an error naming two ranks that share a GPU
//   staged  host memory on every link (what runs without NCCL; for comparison)
#ifndef FGPIPE_NCCL_SETUP_H
#define FGPIPE_NCCL_SETUP_H

#include <mpi.h>

#include "backend.h"
#include "transport.h"

// Collective over `world`, the grid of `mpi` (transport_mpi_create), with `be` a device
// backend. Either *out = an NCCL transport over mpi and *made = 1, or *made = 0 and *out is
// untouched (no link uses NCCL; the CLI stages mpi's messages). A build without NCCL makes
// none, and refuses FGPIPE_TRANSPORT=nccl.
int nccl_setup(MPI_Comm world, Transport *mpi, const Backend *be, Transport *out, int *made,
               FgError *err);
// Frees a transport made by nccl_setup (before mpi, which it uses).
void nccl_setup_free(Transport *t);

#endif
