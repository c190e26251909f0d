#include "node_share_mpi.h"

#include <stdlib.h>

typedef struct {
    MPI_Comm group;   // this stage's replicas on this node, rank = replica order
    MPI_Win win;      // the shared block, or MPI_WIN_NULL
    int world_rank;
} ShareCtx;

static int share_fail(FgError *err, const ShareCtx *c, int code, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return fg_fail(err, FG_ERR_INTERNAL, "rank %d: %s (replicas sharing a node's layer store): %s",
                   c->world_rank, what, msg);
}

static int share_alloc(NodeShare *n, size_t bytes, unsigned char **base, FgError *err) {
    ShareCtx *c = n->ctx;
    if (c->win != MPI_WIN_NULL)
        return fg_fail(err, FG_ERR_INTERNAL, "rank %d: a shared block is already allocated", c->world_rank);
    void *mine = NULL, *io = NULL;
    MPI_Aint size = 0;
    int unit = 0, rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, MPI_INFO_NULL, c->group, &mine, &c->win);
    if (rc != MPI_SUCCESS) return share_fail(err, c, rc, "allocating the shared slots");
    if ((rc = MPI_Win_shared_query(c->win, 0, &size, &unit, &io)) != MPI_SUCCESS)
        return share_fail(err, c, rc, "finding the I/O rank's shared slots");
    if ((rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, c->win)) != MPI_SUCCESS)
        return share_fail(err, c, rc, "opening the shared slots");
    *base = io;
    return FG_OK;
}

static void share_free(NodeShare *n) {
    ShareCtx *c = n->ctx;
    if (c->win == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(c->win);
    MPI_Win_free(&c->win);
}

static int share_barrier(NodeShare *n, FgError *err) {
    ShareCtx *c = n->ctx;
    if (c->win != MPI_WIN_NULL) MPI_Win_sync(c->win);  // this rank's stores, then the others'
    int rc = MPI_Barrier(c->group);
    if (rc != MPI_SUCCESS) return share_fail(err, c, rc, "barrier");
    if (c->win != MPI_WIN_NULL) MPI_Win_sync(c->win);
    return FG_OK;
}

static int share_bcast(NodeShare *n, void *buf, size_t bytes, FgError *err) {
    ShareCtx *c = n->ctx;
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, c->group);
    return rc == MPI_SUCCESS ? FG_OK : share_fail(err, c, rc, "broadcast from the I/O rank");
}

static int share_all(NodeShare *n, int *flag, FgError *err) {
    ShareCtx *c = n->ctx;
    int rc = MPI_Allreduce(MPI_IN_PLACE, flag, 1, MPI_INT, MPI_MIN, c->group);
    return rc == MPI_SUCCESS ? FG_OK : share_fail(err, c, rc, "agreement");
}

// The node's index among the nodes holding this stage: how many I/O ranks of the stage have a
// lower replica (the same on every rank of the group).
static int node_index(MPI_Comm world, int stage, int replica, ShareCtx *c, int io) {
    MPI_Comm data;
    int before = 0;
    MPI_Comm_split(world, stage, replica, &data);
    MPI_Exscan(&io, &before, 1, MPI_INT, MPI_SUM, data);
    if (replica == 0) before = 0;  // MPI_Exscan leaves rank 0's undefined
    MPI_Comm_free(&data);
    MPI_Bcast(&before, 1, MPI_INT, 0, c->group);
    return before;
}

int node_share_mpi_create(MPI_Comm world, int stages, NodeShare *out, FgError *err) {
    int rank;
    MPI_Comm_rank(world, &rank);
    int stage = rank % stages, replica = rank / stages;
    ShareCtx *c = calloc(1, sizeof *c);
    if (!c) return fg_fail(err, FG_ERR_INTERNAL, "out of memory");
    c->world_rank = rank, c->win = MPI_WIN_NULL;
    MPI_Comm node;
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_split(node, stage, replica, &c->group);
    MPI_Comm_free(&node);
    MPI_Comm_set_errhandler(c->group, MPI_ERRORS_RETURN);
    *out = (NodeShare){.ctx = c, .alloc_shared = share_alloc, .free_shared = share_free,
                       .barrier = share_barrier, .bcast = share_bcast, .all = share_all};
    MPI_Comm_rank(c->group, &out->rank);
    MPI_Comm_size(c->group, &out->size);
    out->node = node_index(world, stage, replica, c, out->rank == 0);
    return FG_OK;
}

void node_share_mpi_destroy(NodeShare *n) {
    ShareCtx *c = n->ctx;
    if (!c) return;
    share_free(n);
    MPI_Comm_free(&c->group);
    free(c);
    n->ctx = NULL;
}
