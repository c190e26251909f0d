// fgpipe's entry point: MPI is the launcher and control plane; the CLI and training live in
// src/ and see only the Transport made here.
#include <mpi.h>
#include <stdio.h>

#include "checkpoint_hdf5.h"
#include "cli.h"
#include "stage_store.h"
#include "transport_mpi.h"
#ifdef FGPIPE_HAVE_CUDA
#include "backend_cuda.h"
#include "nccl_setup.h"
#endif

// What the factories made, for main to free after the run (copies: the CLI's own end with it).
typedef struct {
    Transport mpi;    // ctx NULL: none
    Transport nccl;   // wraps mpi for a GPU run whose links use NCCL (ctx NULL: none)
    Storage storage;  // ctx NULL: none
    Backend backend;  // a GPU backend, when the config asks for one
} Made;

#ifdef FGPIPE_HAVE_CUDA
// Each rank takes the GPU of its index among the ranks on its node (modulo the GPUs there:
// several stages may share one GPU).
static int make_backend(void *arg, DeviceKind device, const Backend **out, FgError *err) {
    Made *made = arg;
    (void)device;  // DEVICE_CUDA is the only one besides the CPU
    MPI_Comm node;
    int local, count = backend_cuda_device_count();
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    int rc = backend_cuda_create(count ? local % count : 0, &made->backend, err);
    if (!rc) *out = &made->backend;
    return rc;
}
#endif

// MPI carries host memory; a device backend's messages go through NCCL where nccl_setup finds
// it can connect the ranks, and are otherwise staged through host memory by the CLI.
static int make_transport(void *arg, int stages, int replicas, const Backend *be, Transport *out,
                          Storage *io, FgError *err) {
    Made *made = arg;
    int rc = transport_mpi_create(MPI_COMM_WORLD, stages, replicas, &made->mpi, err);
    if (rc) return rc;
    // Collective over one pipeline: replica 0's stages write the checkpoints.
    made->storage = checkpoint_hdf5(transport_mpi_comm(&made->mpi));
    made->storage.open_stream = stage_store_open;  // out-of-core stages: io/
    *io = made->storage;
    *out = made->mpi;
#ifdef FGPIPE_HAVE_CUDA
    int nccl = 0;
    if (be->on_device && (rc = nccl_setup(MPI_COMM_WORLD, &made->mpi, be, &made->nccl, &nccl, err)))
        return rc;
    if (nccl) *out = made->nccl;
#else
    (void)be;
#endif
    return FG_OK;
}

#ifdef FGPIPE_HAVE_CUDA
#define MAKE_BACKEND make_backend
#else
#define MAKE_BACKEND NULL
#endif

int main(int argc, char **argv) {
    fgpipe_catch_stop_signals();
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Made made = {0};
    int rc = fgpipe_cli(argc, argv, make_transport, MAKE_BACKEND, &made);
    if (rc && size > 1) {
        // The other ranks may be waiting for this one: end the whole job now.
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    if (made.storage.ctx) checkpoint_hdf5_free(&made.storage);
#ifdef FGPIPE_HAVE_CUDA
    if (made.nccl.ctx) nccl_setup_free(&made.nccl);
#endif
    if (made.mpi.ctx) transport_mpi_destroy(&made.mpi);
#ifdef FGPIPE_HAVE_CUDA
    if (made.backend.ctx) backend_cuda_destroy(&made.backend);
#endif
    MPI_Finalize();
    return rc;
}
