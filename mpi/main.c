// fgpipe's entry point: MPI is the launcher and control plane. After the arguments, main makes
// what a run computes with, in order (backend -> transport -> storage -> layer stores), hands
// it to the CLI's training and takes it down afterwards.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint_hdf5.h"
#include "cli.h"
#include "node_share_mpi.h"
#include "layer_spill.h"
#include "stage_store.h"
#include "store_lock.h"
#include "transport_mpi.h"
#include "transport_staged.h"
#ifdef FGPIPE_HAVE_CUDA
#include "cuda_module.h"
#endif

// What main made, to take down after the run (ctx NULL: not made).
typedef struct {
    Backend gpu;            // a GPU backend, when the config asks for one
    Backend cpu;            // the CPU's, when its precision is not fp32 (backend_cpu is)
    Transport mpi;
    Transport nccl;         // wraps mpi for a GPU run whose links use NCCL
    Transport staged;       // wraps mpi (or nccl) for device buffers MPI cannot carry
    Storage storage;
    NodeShare share;        // replicas on one node share one layer store per stage (CPU)
#ifdef FGPIPE_HAVE_CUDA
    const CudaModule *cuda; // loaded for device = cuda only (cuda_module.h)
    void *cuda_handle;
#endif
} Made;

// The config's device: the CPU, or the GPU of the rank's index among the ranks on its node
// (modulo the GPUs there: several stages may share one GPU).
static int make_backend(Made *made, const Config *c, const Backend **out, FgError *err) {
    *out = &backend_cpu;
    if (c->layout.device == DEVICE_CPU && c->layout.precision == PRECISION_FP32) return FG_OK;
    if (c->layout.device == DEVICE_CPU) {
        int rc = backend_cpu_create(c->layout.precision, &made->cpu, err);
        if (!rc) *out = &made->cpu;
        return rc;
    }
#ifdef FGPIPE_HAVE_CUDA
    int rc = cuda_module_load(&made->cuda, &made->cuda_handle, err);
    if (rc) return rc;
    const CudaModule *cuda = made->cuda;
    MPI_Comm node;
    int local, count = cuda->device_count();
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    rc = cuda->create(count ? local % count : 0, &made->gpu, err);
    if (!rc && (rc = cuda->set_precision(&made->gpu, c->layout.precision, err)))
        cuda->destroy(&made->gpu), made->gpu.ctx = NULL;
    if (!rc) *out = &made->gpu;
    return rc;
#else
    (void)made;
    return fg_fail(err, FG_ERR_INPUT, "device = cuda, but this fgpipe was built without CUDA "
                   "(configured with FGPIPE_CUDA=OFF, or nvcc was not found)");
#endif
}

// MPI carries host memory; a device backend's messages go through NCCL where nccl_setup finds
// it can connect the ranks, and are otherwise staged through host memory.
static int make_transport(Made *made, const Config *c, const Backend *be, Transport **out,
                          FgError *err) {
    int rc = transport_mpi_create(MPI_COMM_WORLD, c->layout.stages, c->layout.replicas, &made->mpi, err);
    if (rc) return rc;
    *out = &made->mpi;
#ifdef FGPIPE_HAVE_CUDA
    int nccl = 0;
    if (be->on_device && (rc = made->cuda->nccl_setup(MPI_COMM_WORLD, &made->mpi, be, &made->nccl, &nccl, err)))
        return rc;
    if (nccl) *out = &made->nccl;
#endif
    if (be->on_device && !(*out)->device_memory) {
        made->staged = transport_staged(**out, be);
        *out = &made->staged;
    }
    return FG_OK;
}

static void take_down(Made *made) {
    if (made->staged.ctx) transport_staged_free(&made->staged);
    if (made->storage.ctx) checkpoint_hdf5_free(&made->storage);
#ifdef FGPIPE_HAVE_CUDA
    if (made->nccl.ctx) made->cuda->nccl_free(&made->nccl);
#endif
    if (made->share.ctx) node_share_mpi_destroy(&made->share);
    if (made->mpi.ctx) transport_mpi_destroy(&made->mpi);
    backend_cpu_destroy(&made->cpu);
#ifdef FGPIPE_HAVE_CUDA
    if (made->gpu.ctx) made->cuda->destroy(&made->gpu);
    cuda_module_unload(made->cuda_handle);
#endif
}

static int run(RunArgs *args) {
    Made made = {0};
    FgError err = {0};
    if (args->command == COMMAND_GENERATE || args->command == COMMAND_EVAL) {
        Storage storage = checkpoint_hdf5(MPI_COMM_WORLD);
        LayerStreams streams = {.open = stage_store_open, .open_spill = layer_spill_open,
                                .lock = store_lock_take, .unlock = store_lock_release};
        int rc = cli_read_checkpoint(args, &storage, &streams);
        checkpoint_hdf5_free(&storage);
        return rc;
    }
    TrainEnv env = {0};
    int rc = make_backend(&made, &args->cfg, &env.be, &err);
    if (!rc && args->command == COMMAND_PLAN) {
        rc = cli_plan(args, env.be);
        take_down(&made);
        return rc;
    }
    if (!rc) rc = make_transport(&made, &args->cfg, env.be, &env.tr, &err);
    if (rc) {
        take_down(&made);
        return cli_fail(&err);
    }
    // Checkpoints are collective over one pipeline: replica 0's stages write them.
    made.storage = checkpoint_hdf5(transport_mpi_comm(&made.mpi));
    env.storage = &made.storage;
    LayerStreams streams = {.arg = NULL, .open = stage_store_open, .open_spill = layer_spill_open,
                           .lock = store_lock_take, .unlock = store_lock_release,
                           .resume = args->resume_weights};
    // Streamed stages of replicas on one node share a store: its slots are host memory the
    // ranks map (a device backend computes on its own copies, which the others cannot see).
    if (args->cfg.layout.replicas > 1 && !env.be->on_device &&
        !(rc = node_share_mpi_create(MPI_COMM_WORLD, args->cfg.layout.stages, &made.share, &err)))
        streams.share = &made.share;
    if (rc) {
        take_down(&made);
        return cli_fail(&err);
    }
    env.streams = &streams;
    fgpipe_catch_stop_signals();  // again: MPI start-up may have set its own
    rc = cli_train(args, &env);
    take_down(&made);
    return rc;
}

int main(int argc, char **argv) {
    fgpipe_catch_stop_signals();
    // Open MPI's MPI-IO sets up a shared file pointer with every file it opens; its default
    // (sharedfp/sm) locks it with a named semaphore for the file's base name alone, which rank 0
    // takes inside the open. A rank killed holding it leaves it held, and every later
    // checkpoint.h5.tmp on the machine waits on it forever (docs/checkpoints.md). fgpipe never
    // uses shared file pointers: the component that keeps them per process has no such lock
    // (with none, the open fails; lockedfile leaves lock files in --out). A user's setting is kept.
    setenv("OMPI_MCA_sharedfp", "individual", 0);
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    RunArgs *args = calloc(1, sizeof *args);
    int rc = cli_parse(argc, argv, args);
    if (rc < 0) rc = run(args);
    free(args);
    if (rc && size > 1) {
        // The other ranks may be waiting for this one: end the whole job now.
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    MPI_Finalize();
    return rc;
}
