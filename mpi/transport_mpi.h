// The pipeline Transport over MPI: ranks form an M x R grid (M stages, R replicas); each
// replica's M ranks get their own communicator for the point-to-point traffic and the sums.
#ifndef FGPIPE_TRANSPORT_MPI_H
#define FGPIPE_TRANSPORT_MPI_H

#include <mpi.h>

#include "transport.h"

// Splits `world` into `replicas` pipelines of `stages` stages (world size must be their
// product). Rank r is stage r % M of replica r / M, so one pipeline's ranks are neighbours in
// rank order (and on a node, with by-slot placement).
int transport_mpi_create(MPI_Comm world, int stages, int replicas, Transport *out, FgError *err);
void transport_mpi_destroy(Transport *t);
// The communicator of this rank's pipeline (rank = stage), for collective I/O.
MPI_Comm transport_mpi_comm(const Transport *t);

#endif
