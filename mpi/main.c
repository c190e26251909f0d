// fgpipe's entry point: MPI is the launcher and control plane; the CLI and training live in
// src/ and see only the Transport made here.
#include <mpi.h>
#include <stdio.h>

#include "checkpoint_hdf5.h"
#include "cli.h"
#include "transport_mpi.h"

typedef struct {
    Transport *transport;
    Storage *storage;
} Made;

static int make_transport(void *arg, int stages, const Backend *be, Transport *out, Storage *io,
                          FgError *err) {
    (void)be;  // MPI carries host memory; the CLI stages a device backend's messages
    Made *made = arg;
    int rc = transport_mpi_create(MPI_COMM_WORLD, stages, out, err);
    if (rc) return rc;
    *io = checkpoint_hdf5(transport_mpi_comm(out));
    made->transport = out;
    made->storage = io;
    return FG_OK;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Made made = {0};
    int rc = fgpipe_cli(argc, argv, make_transport, NULL, &made);
    if (rc && size > 1) {
        // The other ranks may be waiting for this one: end the whole job now.
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    if (made.storage) checkpoint_hdf5_free(made.storage);
    if (made.transport) transport_mpi_destroy(made.transport);
    MPI_Finalize();
    return rc;
}
