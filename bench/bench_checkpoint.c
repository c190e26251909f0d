// Checkpoint write and read time of the parallel HDF5 checkpoint (hdf5io/) for a model split
// over the MPI ranks, one stage per rank, with Adam's state (params, m, v: 3 x 4 bytes per
// parameter). Runs exactly the code fgpipe runs (Storage.save, Storage.load), without training.
// Prints one `key value` line per measurement and leaves the checkpoint behind:
// bench/bench_checkpoint.sh has dd write and read the same bytes.
//
// usage: mpirun -np M fgpipe-bench-checkpoint MODEL DIR [REPEATS]
//   write_seconds: best of the repeats after the first (first_write_seconds).
//   MODEL: MLP widths, e.g. 784-8192-8192-8192-8192-8192-10; DIR: where the file goes.
// Before each read the page cache is dropped (root only; otherwise reported as not dropped),
// so reads come from the disk, as after a restart on another node.
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint_hdf5.h"
#include "pipeline.h"
#include "progress.h"

static int drop_page_cache(void) {
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f) return 0;
    int ok = fputs("3\n", f) >= 0;
    return fclose(f) == 0 && ok;
}

static double timed_barrier_since(double t0, MPI_Comm comm) {
    MPI_Barrier(comm);
    return wall_seconds() - t0;
}

// The stage's params, m and v, each a flat buffer of its layers.
typedef struct {
    const Model *m;
    int first, last;
    float *bufs[3];
} Flat;

static int visit_flat(void *source, int writable, LayerVisitor visit, void *arg, FgError *err) {
    (void)writable;
    Flat *f = source;
    return model_visit_layers(f->m, f->first, f->last, f->bufs, 3, visit, arg, err);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, M;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &M);
    if (argc < 3) {
        if (!rank) fprintf(stderr, "usage: mpirun -np M %s MODEL DIR [REPEATS]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    FgError err = {0};
    Model m;
    int layout[SCHED_MAX_STAGES + 1];
    if (model_build_mlp(&m, argv[1], "relu", &err) || partition_layers(&m, M, "auto", NULL, layout, &err)) {
        if (!rank) fprintf(stderr, "bench_checkpoint: %s\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    int first = layout[rank], last = layout[rank + 1];
    size_t n = model_range_count(&m, first, last);
    float *state = fg_alloc_floats(3 * n);  // params, m, v back to back
    model_init_range(&m, first, last, state, 1);
    memcpy(state + n, state, n * sizeof(float));
    memcpy(state + 2 * n, state, n * sizeof(float));
    Flat flat = {&m, first, last, {state, state + n, state + 2 * n}};
    CheckpointState st = {.model = &m, .first = first, .last = last, .n_buffers = 3,
                          .buffers = {"params", "optimizer/m", "optimizer/v"},
                          .visit_layers = visit_flat, .source = &flat, .step = 1, .seed = 1,
                          .config_text = "bench", .stages = M, .layout = layout};

    char path[4096];
    snprintf(path, sizeof path, "%s/bench-checkpoint.h5", argv[2]);
    Storage io = checkpoint_hdf5(MPI_COMM_WORLD);
    double bytes = 3.0 * (double)m.n_params * sizeof(float);
    // The first write from a process's fresh memory is slow on some virtual machines (a plain
    // pwrite loop shows it too), so it is reported apart: later checkpoints of a run are warm.
    double first_write = NAN, best_write = INFINITY, best_read = INFINITY;
    int dropped = 1, rc = 0, failed = 0;  // rc: this rank's; failed: any rank's
    for (int r = 0; r < repeats && !failed; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = wall_seconds();
        rc = io.save(&io, &st, path, &err);
        double seconds = timed_barrier_since(t0, MPI_COMM_WORLD);
        if (r == 0) first_write = seconds;
        if (r > 0 || repeats == 1) best_write = fmin(best_write, seconds);
        MPI_Allreduce(&rc, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (failed) break;
        if (!rank) dropped &= drop_page_cache();
        MPI_Barrier(MPI_COMM_WORLD);
        memset(state, 0, 3 * n * sizeof(float));
        t0 = wall_seconds();
        rc = io.load(&io, &st, path, &err);
        best_read = fmin(best_read, timed_barrier_since(t0, MPI_COMM_WORLD));
        MPI_Allreduce(&rc, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    // The read must give back what was written.
    float *expect = fg_alloc_floats(n);
    model_init_range(&m, first, last, expect, 1);
    if (rc) fprintf(stderr, "bench_checkpoint: rank %d: %s\n", rank, err.msg);
    int bad = failed || memcmp(expect, state + 2 * n, n * sizeof(float)) != 0, any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!rank) {
        if (any_bad && !failed) fprintf(stderr, "bench_checkpoint: the checkpoint read back differs\n");
        printf("ranks %d\nparams %zu\nbytes %.0f\nfirst_write_seconds %.4f\nwrite_seconds %.4f\n"
               "read_seconds %.4f\npage_cache_dropped %d\nfile %s\n", M, m.n_params, bytes,
               first_write, best_write, best_read, dropped, path);
    }
    fg_free(expect);
    fg_free(state);
    checkpoint_hdf5_free(&io);
    MPI_Finalize();
    return any_bad ? 1 : 0;
}
