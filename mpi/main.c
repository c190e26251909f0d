// fgpipe's entry point: MPI is the launcher and control plane; the CLI and training live in
// src/ and see only the Transport made here.
#include <mpi.h>
#include <stdio.h>

#include "cli.h"
#include "transport_mpi.h"

static int make_transport(void *arg, int stages, Transport *out, FgError *err) {
    int rc = transport_mpi_create(MPI_COMM_WORLD, stages, out, err);
    if (!rc) *(Transport **)arg = out;
    return rc;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Transport *made = NULL;
    int rc = fgpipe_cli(argc, argv, make_transport, &made);
    if (rc && size > 1) {
        // The other ranks may be waiting for this one: end the whole job now.
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    if (made) transport_mpi_destroy(made);
    MPI_Finalize();
    return rc;
}
