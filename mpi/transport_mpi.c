#include "transport_mpi.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Messages are bytes (MPI_BYTE): what they hold has its own element type (transport.h).
// Sends go out non-blocking from private copies, so the caller can reuse its buffer at once.
// A send never waits for its receiver (which may itself be waiting for this rank): a copy is
// reused once its send has completed, and more copies are made when all are in flight.
enum { MAX_SLOTS = 4096 };

typedef struct {
    MPI_Comm pipe;   // this replica's stages, rank = stage
    MPI_Comm data;   // the same stage of every replica (data parallelism), rank = replica
    MPI_Comm grid;   // every rank of the grid
    MPI_Request replica_sum;  // the gradient sum over `data` in flight, or MPI_REQUEST_NULL
    int world_rank, replica;
    void **buf;
    size_t *cap;  // bytes
    MPI_Request *req;
    int n_slots;
    struct { MPI_Request req; size_t bytes; int from, tag; } posted[TRANSPORT_MAX_POSTED];
} MpiCtx;

static int mpi_fail(FgError *err, const MpiCtx *c, int code, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return fg_fail(err, FG_ERR_INTERNAL, "rank %d: %s: %s", c->world_rank, what, msg);
}

static int mpi_send(Transport *t, int to, int tag, const void *buf, size_t bytes, FgError *err) {
    MpiCtx *c = t->ctx;
    int slot = -1, done, rc;
    for (int i = 0; i < c->n_slots && slot < 0; i++) {
        if ((rc = MPI_Test(&c->req[i], &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return mpi_fail(err, c, rc, "completing an earlier send");
        if (done) slot = i;
    }
    if (slot < 0) {
        if (c->n_slots == MAX_SLOTS)
            return fg_fail(err, FG_ERR_INTERNAL, "rank %d: %d sends in flight", c->world_rank, MAX_SLOTS);
        slot = c->n_slots++;
        c->buf = realloc(c->buf, c->n_slots * sizeof *c->buf);
        c->cap = realloc(c->cap, c->n_slots * sizeof *c->cap);
        c->req = realloc(c->req, c->n_slots * sizeof *c->req);
        if (!c->buf || !c->cap || !c->req) return fg_fail(err, FG_ERR_INTERNAL, "out of memory");
        c->buf[slot] = NULL, c->cap[slot] = 0, c->req[slot] = MPI_REQUEST_NULL;
    }
    if (bytes > INT_MAX) return fg_fail(err, FG_ERR_INPUT, "a message of %zu bytes is too large for MPI", bytes);
    if (c->cap[slot] < bytes) {
        fg_free(c->buf[slot]);
        c->buf[slot] = fg_alloc_bytes(bytes);
        c->cap[slot] = bytes;
    }
    memcpy(c->buf[slot], buf, bytes);
    if ((rc = MPI_Isend(c->buf[slot], (int)bytes, MPI_BYTE, to, tag, c->pipe, &c->req[slot])) != MPI_SUCCESS)
        return mpi_fail(err, c, rc, "send");
    return FG_OK;
}

static int mpi_recv(Transport *t, int from, int tag, void *buf, size_t bytes, FgError *err) {
    MpiCtx *c = t->ctx;
    MPI_Status st;
    int count, rc;
    // Probe first: a message of the wrong size is named, not silently truncated.
    if ((rc = MPI_Probe(from, tag, c->pipe, &st)) != MPI_SUCCESS) return mpi_fail(err, c, rc, "probe");
    MPI_Get_count(&st, MPI_BYTE, &count);
    if ((size_t)count != bytes)
        return fg_fail(err, FG_ERR_INTERNAL,
                       "rank %d (stage %d): message from stage %d (tag %d) has %d bytes, expected %zu",
                       c->world_rank, t->stage, from, tag, count, bytes);
    if ((rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, from, tag, c->pipe, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
        return mpi_fail(err, c, rc, "receive");
    return FG_OK;
}

static int mpi_post_recv(Transport *t, int from, int tag, void *buf, size_t bytes, int *handle,
                         FgError *err) {
    MpiCtx *c = t->ctx;
    int h = 0, rc;
    while (h < TRANSPORT_MAX_POSTED && c->posted[h].req != MPI_REQUEST_NULL) h++;
    if (h == TRANSPORT_MAX_POSTED)
        return fg_fail(err, FG_ERR_INTERNAL, "rank %d: more than %d receives posted", c->world_rank,
                       TRANSPORT_MAX_POSTED);
    if (bytes > INT_MAX) return fg_fail(err, FG_ERR_INPUT, "a message of %zu bytes is too large for MPI", bytes);
    if ((rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, from, tag, c->pipe, &c->posted[h].req)) != MPI_SUCCESS)
        return mpi_fail(err, c, rc, "posting a receive");
    c->posted[h].bytes = bytes, c->posted[h].from = from, c->posted[h].tag = tag;
    *handle = h;
    return FG_OK;
}

static int mpi_wait_recv(Transport *t, int h, FgError *err) {
    MpiCtx *c = t->ctx;
    MPI_Status st;
    int count, cls, rc = MPI_Wait(&c->posted[h].req, &st);
    if (rc != MPI_SUCCESS) {
        MPI_Error_class(rc, &cls);
        if (cls != MPI_ERR_TRUNCATE) return mpi_fail(err, c, rc, "receive");
        return fg_fail(err, FG_ERR_INTERNAL,
                       "rank %d (stage %d): message from stage %d (tag %d) is longer than the "
                       "%zu bytes expected",
                       c->world_rank, t->stage, c->posted[h].from, c->posted[h].tag, c->posted[h].bytes);
    }
    MPI_Get_count(&st, MPI_BYTE, &count);
    if ((size_t)count != c->posted[h].bytes)
        return fg_fail(err, FG_ERR_INTERNAL,
                       "rank %d (stage %d): message from stage %d (tag %d) has %d bytes, expected %zu",
                       c->world_rank, t->stage, c->posted[h].from, c->posted[h].tag, count, c->posted[h].bytes);
    return FG_OK;
}

static int mpi_allreduce(Transport *t, double *buf, int n, FgError *err) {
    MpiCtx *c = t->ctx;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, c->pipe);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(err, c, rc, "allreduce");
}

static int mpi_allreduce_world(Transport *t, double *buf, int n, FgError *err) {
    MpiCtx *c = t->ctx;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, c->grid);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(err, c, rc, "allreduce over the grid");
}

static int mpi_start_replica_sum(Transport *t, float *buf, size_t n, FgError *err) {
    MpiCtx *c = t->ctx;
    if (c->replica_sum != MPI_REQUEST_NULL)
        return fg_fail(err, FG_ERR_INTERNAL, "rank %d: a replica sum is already in flight", c->world_rank);
    if (n > INT_MAX) return fg_fail(err, FG_ERR_INPUT, "a sum of %zu floats is too large for MPI", n);
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->data, &c->replica_sum);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(err, c, rc, "starting the sum over replicas");
}

static int mpi_wait_replica_sum(Transport *t, FgError *err) {
    MpiCtx *c = t->ctx;
    int rc = MPI_Wait(&c->replica_sum, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(err, c, rc, "sum over replicas");
}

// Whether some node runs more of the job's ranks than it has cores for them (the same on every
// rank). The node's cores for the job are the union of its ranks' affinity masks (Slurm and
// containers narrow them; binding gives each rank its own), or all of the node's.
static int ranks_share_cores(MPI_Comm world) {
    MPI_Comm node;
    int here, more = 0;
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &here);
    cpu_set_t mask, all;
    int known = sched_getaffinity(0, sizeof mask, &mask) == 0, everywhere = 0;
    MPI_Allreduce(&known, &everywhere, 1, MPI_INT, MPI_MIN, node);
    if (!known) CPU_ZERO(&mask);
    MPI_Allreduce(&mask, &all, (int)sizeof mask, MPI_BYTE, MPI_BOR, node);
    MPI_Comm_free(&node);
    long cores = everywhere ? CPU_COUNT(&all) : sysconf(_SC_NPROCESSORS_ONLN);
    int mine = cores > 0 && here > cores;
    MPI_Allreduce(&mine, &more, 1, MPI_INT, MPI_MAX, world);
    return more;
}

int transport_mpi_create(MPI_Comm world, int stages, int replicas, Transport *out, FgError *err) {
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    if (size != stages * replicas)
        return fg_fail(err, FG_ERR_INPUT,
                       "%d MPI ranks, but stages x replicas = %d x %d needs %d: start %d ranks, or "
                       "set stages and replicas so that their product is %d",
                       size, stages, replicas, stages * replicas, stages * replicas, size);
    MpiCtx *c = calloc(1, sizeof *c);
    c->world_rank = rank;
    c->replica = rank / stages;
    c->replica_sum = MPI_REQUEST_NULL;
    for (int i = 0; i < TRANSPORT_MAX_POSTED; i++) c->posted[i].req = MPI_REQUEST_NULL;
    MPI_Comm_split(world, c->replica, rank % stages, &c->pipe);
    MPI_Comm_split(world, rank % stages, c->replica, &c->data);
    MPI_Comm_dup(world, &c->grid);
    // Errors come back as codes so the message can name the rank; main then aborts the job.
    MPI_Comm_set_errhandler(c->pipe, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->data, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->grid, MPI_ERRORS_RETURN);
    Transport t = {.ctx = c, .stage = rank % stages, .stages = stages, .replica = c->replica,
                   .replicas = replicas, .send = mpi_send, .recv = mpi_recv,
                   .post_recv = mpi_post_recv, .wait_recv = mpi_wait_recv,
                   .allreduce_sum = mpi_allreduce, .allreduce_sum_world = mpi_allreduce_world,
                   .start_replica_sum = mpi_start_replica_sum,
                   .wait_replica_sum = mpi_wait_replica_sum,
                   .shares_cores = ranks_share_cores(world)};
    *out = t;
    return FG_OK;
}

void transport_mpi_destroy(Transport *t) {
    MpiCtx *c = t->ctx;
    if (!c) return;
    MPI_Waitall(c->n_slots, c->req, MPI_STATUSES_IGNORE);
    MPI_Wait(&c->replica_sum, MPI_STATUS_IGNORE);
    for (int i = 0; i < c->n_slots; i++) fg_free(c->buf[i]);
    free(c->buf), free(c->cap), free(c->req);
    MPI_Comm_free(&c->pipe);
    MPI_Comm_free(&c->data);
    MPI_Comm_free(&c->grid);
    free(c);
    t->ctx = NULL;
}

MPI_Comm transport_mpi_comm(const Transport *t) { return ((const MpiCtx *)t->ctx)->pipe; }
