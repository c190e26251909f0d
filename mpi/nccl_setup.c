#include "nccl_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef FGPIPE_HAVE_NCCL
#include "transport_nccl.h"
#endif

enum { USE_AUTO, USE_NCCL, USE_STAGED };
static const char *const use_names[] = {"auto", "nccl", "staged"};

// FGPIPE_TRANSPORT as world rank 0 has it: every rank must decide alike, and mpirun does not
// forward the environment to other hosts unless asked.
static int transport_choice(MPI_Comm world, int *use, FgError *err) {
    char v[16] = "auto";
    int rank;
    MPI_Comm_rank(world, &rank);
    const char *env = getenv("FGPIPE_TRANSPORT");
    if (rank == 0 && env && *env) snprintf(v, sizeof v, "%s", env);
    MPI_Bcast(v, sizeof v, MPI_CHAR, 0, world);
    for (*use = 0; *use < 3; (*use)++)
        if (strcmp(v, use_names[*use]) == 0) return FG_OK;
    return fg_fail(err, FG_ERR_INPUT, "FGPIPE_TRANSPORT=%s: expected auto, nccl or staged", v);
}

#ifndef FGPIPE_HAVE_NCCL

int nccl_setup(MPI_Comm world, Transport *mpi, const Backend *be, Transport *out, int *made,
               FgError *err) {
    (void)mpi, (void)be, (void)out;
    int use, rc = transport_choice(world, &use, err);
    *made = 0;
    if (!rc && use == USE_NCCL)
        return fg_fail(err, FG_ERR_INPUT, "FGPIPE_TRANSPORT=nccl, but this fgpipe was built "
                       "without NCCL (nccl.h or libnccl was not found when it was configured)");
    return rc;
}

void nccl_setup_free(Transport *t) { (void)t; }

#else

// Where a rank computes: its host and its GPU's UUID.
typedef struct {
    char host[64];
    char gpu[NCCL_GPU_NAME_BYTES];
} Place;

static int same_gpu(const Place *a, const Place *b) {
    return strcmp(a->host, b->host) == 0 && strcmp(a->gpu, b->gpu) == 0;
}

// Whether the R replicas of stage s (ranks q*M + s) are on distinct GPUs; if not, *a and *b
// are two that share one.
static int replicas_distinct(const Place *all, int M, int R, int s, int *a, int *b) {
    for (int i = 0; i < R; i++)
        for (int j = i + 1; j < R; j++)
            if (same_gpu(&all[i * M + s], &all[j * M + s])) {
                *a = i * M + s, *b = j * M + s;
                return 0;
            }
    return 1;
}

// The communicator ids a rank makes: its link to s+1 (both directions) and, on replica 0, its
// stage's replica group.
typedef struct {
    NcclId next[2], replica;
} Ids;

int nccl_setup(MPI_Comm world, Transport *mpi, const Backend *be, Transport *out, int *made,
               FgError *err) {
    int use, rank, size, rc;
    *made = 0;
    if ((rc = transport_choice(world, &use, err))) return rc;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int M = mpi->stages, R = mpi->replicas, s = mpi->stage;  // rank = replica * M + stage
    if (use == USE_STAGED) {
        if (rank == 0) fprintf(stderr, "fgpipe: GPU messages: through host memory (FGPIPE_TRANSPORT=staged)\n");
        return FG_OK;
    }
    Place mine = {0}, *all = calloc((size_t)size, sizeof *all);
    gethostname(mine.host, sizeof mine.host - 1);
    if ((rc = transport_nccl_gpu_name(be, mine.gpu, err))) goto done;
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, world);

    // Every rank counts every link of the grid from the same table, so all decide alike.
    int links = 0, nccl_links = 0, a = -1, b = -1, x, y;  // a, b: two ranks on one GPU
    for (int q = 0; q < R; q++)
        for (int t = 0; t + 1 < M; t++, links++) {
            if (!same_gpu(&all[q * M + t], &all[q * M + t + 1])) nccl_links++;
            else if (a < 0) a = q * M + t, b = a + 1;
        }
    for (int t = 0; R > 1 && t < M; t++, links++) {
        if (replicas_distinct(all, M, R, t, &x, &y)) nccl_links++;
        else if (a < 0) a = x, b = y;
    }
    if (use == USE_NCCL && nccl_links < links) {
        rc = fg_fail(err, FG_ERR_INPUT, "FGPIPE_TRANSPORT=nccl: ranks %d and %d are both on %s "
                     "of %s, and NCCL cannot connect two ranks on one GPU (give each rank a GPU "
                     "of its own, or use FGPIPE_TRANSPORT=auto)", a, b, all[a].gpu, all[a].host);
        goto done;
    }
    if (rank == 0)
        fprintf(stderr, "fgpipe: GPU messages: NCCL on %d of %d links%s (FGPIPE_TRANSPORT=%s)\n",
                nccl_links, links, nccl_links < links ? ", host memory on the others" : "",
                use_names[use]);
    if (nccl_links == 0) goto done;

    NcclWiring w = {0};
    w.prev = s > 0 && !same_gpu(&all[rank - 1], &all[rank]);
    w.next = s < M - 1 && !same_gpu(&all[rank], &all[rank + 1]);
    w.replicas = R > 1 && replicas_distinct(all, M, R, s, &x, &y);
    // The lower stage of a link makes its ids, replica 0 its stage's; one allgather shares them
    // (an id is made only where it is used: each opens a socket until its ranks connect).
    Ids my, *ids = calloc((size_t)size, sizeof *ids);
    memset(&my, 0, sizeof my);
    for (int d = 0; w.next && d < 2 && !rc; d++) rc = transport_nccl_new_id(&my.next[d], err);
    if (!rc && w.replicas && mpi->replica == 0) rc = transport_nccl_new_id(&my.replica, err);
    if (!rc) {
        MPI_Allgather(&my, sizeof my, MPI_BYTE, ids, sizeof my, MPI_BYTE, world);
        if (w.prev) memcpy(w.to_prev, ids[rank - 1].next, sizeof w.to_prev);
        memcpy(w.to_next, my.next, sizeof w.to_next);
        w.replica = ids[s].replica;  // replica 0's rank of stage s is s
        rc = transport_nccl_create(*mpi, be, &w, out, err);
        *made = rc == FG_OK;
    }
    free(ids);
done:
    free(all);
    return rc;
}

void nccl_setup_free(Transport *t) { transport_nccl_destroy(t); }

#endif
