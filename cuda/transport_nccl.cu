// The NCCL transport (transport_nccl.h).
//
// Streams. Every communicator has a stream of its own, apart from the backend's compute stream:
// an NCCL kernel waits on the GPU until its peer joins, so on the compute stream it would hold
// back the stage's work, and on a stream shared by two communicators a send waiting for its
// receiver would hold back a receive queued behind it, which the peer's own send may wait for.
//
// Sends. The caller may reuse its buffer as soon as send() returns (transport.h), and the host
// must not wait for the receiver (it may be waiting for this rank). So the message is copied on
// the compute stream, after the kernels that made it, into a device slot of ours; the
// communicator's stream waits for the copy (an event) and sends from the slot. The copy is
// device to device, small beside the layer that computed the message. A slot is free again once
// the event recorded after its send has completed (cudaEventQuery: no waiting); when every slot
// is in flight a new one is made, so there are as many as sends were ever in flight at once.
//
// Receives. post_recv queues ncclRecv after an event on the compute stream (the buffer's
// earlier readers are done first); wait_recv makes the compute stream wait for the event
// recorded after the receive. The host does not block there: the backend's next sync does, if
// the message is late.
//
// Replica sums: ncclAllReduce in place on the replica communicator's stream, after the compute
// that produced the buffer; wait_replica_sum makes the compute stream wait for it.
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "transport_nccl.h"
extern "C" {
#include "transport_staged.h"
}

static_assert(sizeof(NcclId) == sizeof(ncclUniqueId), "an NcclId holds an ncclUniqueId");

enum { MAX_SLOTS = 4096 };

// A communicator (one direction of a link, or the replicas of a stage), its stream, and an
// event that orders the stream after the compute queued so far.
typedef struct {
    ncclComm_t comm;  // NULL: this link is not NCCL's
    cudaStream_t stream;
    cudaEvent_t after_compute;
    int peer;  // the other end's rank in comm (point-to-point)
} Channel;

typedef struct {
    void *buf;
    size_t cap;  // bytes
    cudaEvent_t sent;  // recorded after the slot's last send
} Slot;

typedef struct {
    Channel *channel;     // NULL: posted on the staged fallback
    int staged_handle;
    cudaEvent_t received;
    char op[96];          // "receive from stage 1 (tag 8195, 16384 bytes)", for errors
    int used;
} Posted;

typedef struct {
    Transport inner;   // MPI: the host scalars (caller's)
    Transport staged;  // inner wrapped for device buffers: links NCCL does not serve
    int device, stage, replica, replicas;
    cudaStream_t compute;  // the backend's
    Channel send_next, recv_next, recv_prev, send_prev, replica_sum;
    Slot *slots;
    int n_slots;
    Posted posted[TRANSPORT_MAX_POSTED];
    cudaEvent_t sum_done;
    int sum_in_flight;
    char sum_op[64];
} Nccl;

static int failed(FgError *err, const Nccl *c, const char *op, const char *why) {
    return fg_fail(err, FG_ERR_INTERNAL, "GPU %d (stage %d, replica %d): NCCL transport: %s: %s",
                   c->device, c->stage, c->replica, op, why);
}

// Each returns from the enclosing function (which has `c`, `op` and `err`) on failure.
#define TRY_CUDA(call)                                                            \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) return failed(err, c, op, cudaGetErrorString(e_)); \
    } while (0)
#define TRY_NCCL(call)                                                            \
    do {                                                                          \
        ncclResult_t r_ = (call);                                                 \
        if (r_ != ncclSuccess) return failed(err, c, op, ncclGetErrorString(r_)); \
    } while (0)

// A failure NCCL found while its kernels ran (a peer gone, a network error), if any.
static int check_async(const Nccl *c, const Channel *ch, const char *op, FgError *err) {
    ncclResult_t state = ncclSuccess;
    TRY_NCCL(ncclCommGetAsyncError(ch->comm, &state));
    if (state == ncclSuccess) return FG_OK;
    char why[256];
    snprintf(why, sizeof why, "%s (%s)", ncclGetErrorString(state), ncclGetLastError(ch->comm));
    return failed(err, c, op, why);
}

// The channel's next operation starts after the compute queued so far. (A stream waits for
// an event's record at the time of the wait, so one event per channel can be recorded again.)
static cudaError_t after_compute(const Nccl *c, const Channel *ch) {
    cudaError_t e = cudaEventRecord(ch->after_compute, c->compute);
    return e != cudaSuccess ? e : cudaStreamWaitEvent(ch->stream, ch->after_compute, 0);
}

// A slot of at least `bytes` bytes whose last send has completed.
static int take_slot(Nccl *c, size_t bytes, Slot **out, const char *op, FgError *err) {
    Slot *s = NULL;
    for (int i = 0; i < c->n_slots && !s; i++) {
        cudaError_t e = cudaEventQuery(c->slots[i].sent);
        if (e == cudaSuccess) s = &c->slots[i];
        else if (e != cudaErrorNotReady) return failed(err, c, op, cudaGetErrorString(e));
    }
    if (!s) {
        if (c->n_slots == MAX_SLOTS) return failed(err, c, op, "4096 sends in flight");
        Slot *grown = (Slot *)realloc(c->slots, (c->n_slots + 1) * sizeof *grown);
        if (!grown) return failed(err, c, op, "out of host memory");
        c->slots = grown;
        s = &c->slots[c->n_slots++];
        memset(s, 0, sizeof *s);
        TRY_CUDA(cudaEventCreateWithFlags(&s->sent, cudaEventDisableTiming));
    }
    if (s->cap < bytes) {
        // Stream-ordered: cudaFree would wait for the whole device, including NCCL kernels
        // that wait for a peer that may be waiting for this rank.
        if (s->buf) TRY_CUDA(cudaFreeAsync(s->buf, c->compute));
        s->buf = NULL;
        s->cap = 0;
        TRY_CUDA(cudaMallocAsync(&s->buf, bytes, c->compute));
        s->cap = bytes;
    }
    *out = s;
    return FG_OK;
}

static Channel *send_channel(Nccl *c, int to) {
    if (to == c->stage + 1 && c->send_next.comm) return &c->send_next;
    if (to == c->stage - 1 && c->send_prev.comm) return &c->send_prev;
    return NULL;
}

static Channel *recv_channel(Nccl *c, int from) {
    if (from == c->stage + 1 && c->recv_next.comm) return &c->recv_next;
    if (from == c->stage - 1 && c->recv_prev.comm) return &c->recv_prev;
    return NULL;
}

static int nccl_send(Transport *t, int to, int tag, const void *buf, size_t bytes, FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    Channel *ch = send_channel(c, to);
    if (!ch) return c->staged.send(&c->staged, to, tag, buf, bytes, err);
    char op[96];
    snprintf(op, sizeof op, "send to stage %d (tag %d, %zu bytes)", to, tag, bytes);
    Slot *s;
    int rc = take_slot(c, bytes, &s, op, err);
    if (rc) return rc;
    TRY_CUDA(cudaMemcpyAsync(s->buf, buf, bytes, cudaMemcpyDeviceToDevice, c->compute));
    TRY_CUDA(after_compute(c, ch));
    TRY_NCCL(ncclSend(s->buf, bytes, ncclUint8, ch->peer, ch->comm, ch->stream));
    TRY_CUDA(cudaEventRecord(s->sent, ch->stream));
    return check_async(c, ch, op, err);
}

static int nccl_post_recv(Transport *t, int from, int tag, void *buf, size_t bytes, int *handle,
                          FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    int h = 0;
    while (h < TRANSPORT_MAX_POSTED && c->posted[h].used) h++;
    if (h == TRANSPORT_MAX_POSTED)
        return fg_fail(err, FG_ERR_INTERNAL, "NCCL transport: more than %d receives posted",
                       TRANSPORT_MAX_POSTED);
    Posted *p = &c->posted[h];
    const char *op = p->op;
    snprintf(p->op, sizeof p->op, "receive from stage %d (tag %d, %zu bytes)", from, tag, bytes);
    p->channel = recv_channel(c, from);
    if (p->channel) {
        TRY_CUDA(after_compute(c, p->channel));
        TRY_NCCL(ncclRecv(buf, bytes, ncclUint8, p->channel->peer, p->channel->comm, p->channel->stream));
        TRY_CUDA(cudaEventRecord(p->received, p->channel->stream));
    } else {
        int rc = c->staged.post_recv(&c->staged, from, tag, buf, bytes, &p->staged_handle, err);
        if (rc) return rc;
    }
    p->used = 1;
    *handle = h;
    return FG_OK;
}

static int nccl_wait_recv(Transport *t, int h, FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    Posted *p = &c->posted[h];
    const char *op = p->op;
    p->used = 0;
    if (!p->channel) return c->staged.wait_recv(&c->staged, p->staged_handle, err);
    TRY_CUDA(cudaStreamWaitEvent(c->compute, p->received, 0));
    return check_async(c, p->channel, op, err);
}

static int nccl_recv(Transport *t, int from, int tag, void *buf, size_t bytes, FgError *err) {
    int h = 0, rc = nccl_post_recv(t, from, tag, buf, bytes, &h, err);
    return rc ? rc : nccl_wait_recv(t, h, err);
}

// The step's scalars are host doubles: MPI carries them.
static int nccl_allreduce(Transport *t, double *buf, int n, FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    return c->inner.allreduce_sum(&c->inner, buf, n, err);
}

static int nccl_allreduce_world(Transport *t, double *buf, int n, FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    return c->inner.allreduce_sum_world(&c->inner, buf, n, err);
}

static int nccl_start_replica_sum(Transport *t, float *buf, size_t n, FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    Channel *ch = &c->replica_sum;
    if (!ch->comm) return c->staged.start_replica_sum(&c->staged, buf, n, err);
    const char *op = c->sum_op;
    snprintf(c->sum_op, sizeof c->sum_op, "sum of %zu floats over %d replicas", n, c->replicas);
    if (c->sum_in_flight) return failed(err, c, op, "a replica sum is already in flight");
    TRY_CUDA(after_compute(c, ch));
    TRY_NCCL(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, ch->comm, ch->stream));
    TRY_CUDA(cudaEventRecord(c->sum_done, ch->stream));
    c->sum_in_flight = 1;
    return check_async(c, ch, op, err);
}

static int nccl_wait_replica_sum(Transport *t, FgError *err) {
    Nccl *c = (Nccl *)t->ctx;
    Channel *ch = &c->replica_sum;
    if (!ch->comm) return c->staged.wait_replica_sum(&c->staged, err);
    if (!c->sum_in_flight) return FG_OK;
    const char *op = c->sum_op;
    c->sum_in_flight = 0;
    TRY_CUDA(cudaStreamWaitEvent(c->compute, c->sum_done, 0));
    return check_async(c, ch, op, err);
}

// Frees what was made. After a failure (aborting) the communicators are aborted, not waited for.
static void release(Nccl *c, int aborting) {
    Channel *chans[] = {&c->send_next, &c->recv_next, &c->recv_prev, &c->send_prev, &c->replica_sum};
    for (Channel *ch : chans) {
        if (ch->stream && !aborting) cudaStreamSynchronize(ch->stream);
        // Links to s+1 before links to s-1 on every rank: if destroying is collective, the
        // waits run from the last stage down and never in a circle.
        if (ch->comm && aborting) ncclCommAbort(ch->comm);
        else if (ch->comm) ncclCommDestroy(ch->comm);
        if (ch->after_compute) cudaEventDestroy(ch->after_compute);
        if (ch->stream) cudaStreamDestroy(ch->stream);
    }
    for (int i = 0; i < c->n_slots; i++) {
        if (c->slots[i].buf) cudaFreeAsync(c->slots[i].buf, c->compute);
        cudaEventDestroy(c->slots[i].sent);
    }
    cudaStreamSynchronize(c->compute);
    for (int h = 0; h < TRANSPORT_MAX_POSTED; h++)
        if (c->posted[h].received) cudaEventDestroy(c->posted[h].received);
    if (c->sum_done) cudaEventDestroy(c->sum_done);
    transport_staged_free(&c->staged);
    free(c->slots);
    free(c);
}

// Streams, events and the communicators of the links in w (collective with their peers).
static int connect_links(Nccl *c, const NcclWiring *w, int stages, FgError *err) {
    const char *op = "connecting the stages";
    if ((w->prev && c->stage == 0) || (w->next && c->stage == stages - 1) ||
        (w->replicas && c->replicas < 2))
        return failed(err, c, op, "a link to a stage or replica that does not exist");
    TRY_CUDA(cudaSetDevice(c->device));
    // On each link the lower stage is rank 0, in both directions' communicators.
    struct {
        Channel *ch;
        int use;
        const NcclId *id;
        int nranks, rank;
    } plan[] = {
        {&c->recv_prev, w->prev, &w->to_prev[NCCL_FORWARD], 2, 1},
        {&c->send_prev, w->prev, &w->to_prev[NCCL_BACKWARD], 2, 1},
        {&c->send_next, w->next, &w->to_next[NCCL_FORWARD], 2, 0},
        {&c->recv_next, w->next, &w->to_next[NCCL_BACKWARD], 2, 0},
        {&c->replica_sum, w->replicas, &w->replica, c->replicas, c->replica},
    };
    for (auto &p : plan) {
        if (!p.use) continue;
        p.ch->peer = 1 - p.rank;
        TRY_CUDA(cudaStreamCreateWithFlags(&p.ch->stream, cudaStreamNonBlocking));
        TRY_CUDA(cudaEventCreateWithFlags(&p.ch->after_compute, cudaEventDisableTiming));
    }
    for (int h = 0; h < TRANSPORT_MAX_POSTED; h++)
        TRY_CUDA(cudaEventCreateWithFlags(&c->posted[h].received, cudaEventDisableTiming));
    TRY_CUDA(cudaEventCreateWithFlags(&c->sum_done, cudaEventDisableTiming));
    // One at a time, each blocking until its peers join, in the plan's order on every rank:
    // stage s joins the link to s-1 (which s-1 joins after its own link to s-2), then the link
    // to s+1, then its replicas (whose ranks all get there once their pipelines' links are
    // made). The waits run from stage 0 up and never in a circle.
    for (auto &p : plan) {
        if (!p.use) continue;
        ncclUniqueId id;
        memcpy(&id, p.id, sizeof id);
        TRY_NCCL(ncclCommInitRank(&p.ch->comm, p.nranks, id, p.rank));
    }
    return FG_OK;
}

extern "C" int transport_nccl_gpu_name(const Backend *be, char name[NCCL_GPU_NAME_BYTES],
                                       FgError *err) {
    int device = cuda_ctx(be)->device;
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess)
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: reading its UUID: %s", device, cudaGetErrorString(e));
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    int len = snprintf(name, NCCL_GPU_NAME_BYTES, "GPU-");
    for (int i = 0; i < 16; i++)
        len += snprintf(name + len, NCCL_GPU_NAME_BYTES - len, "%s%02x",
                        i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
    return FG_OK;
}

extern "C" int transport_nccl_new_id(NcclId *id, FgError *err) {
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return fg_fail(err, FG_ERR_INTERNAL, "NCCL: making a communicator id: %s", ncclGetErrorString(r));
    memcpy(id, &u, sizeof u);
    return FG_OK;
}

extern "C" int transport_nccl_create(Transport inner, const Backend *be, const NcclWiring *w,
                                     Transport *out, FgError *err) {
    Nccl *c = (Nccl *)calloc(1, sizeof *c);
    if (!c) return fg_fail(err, FG_ERR_INTERNAL, "NCCL transport: out of host memory");
    c->inner = inner;
    c->staged = transport_staged(inner, be);
    c->device = cuda_ctx(be)->device;
    c->compute = cuda_ctx(be)->stream;
    c->stage = inner.stage, c->replica = inner.replica, c->replicas = inner.replicas;
    int rc = connect_links(c, w, inner.stages, err);
    if (rc) {
        release(c, 1);
        return rc;
    }
    Transport t = inner;
    t.ctx = c;
    t.device_memory = 1;
    t.send = nccl_send;
    t.recv = nccl_recv;
    t.post_recv = nccl_post_recv;
    t.wait_recv = nccl_wait_recv;
    t.allreduce_sum = nccl_allreduce;
    t.allreduce_sum_world = nccl_allreduce_world;
    t.start_replica_sum = nccl_start_replica_sum;
    t.wait_replica_sum = nccl_wait_replica_sum;
    *out = t;
    return FG_OK;
}

extern "C" void transport_nccl_destroy(Transport *t) {
    if (!t->ctx) return;
    release((Nccl *)t->ctx, 0);
    t->ctx = NULL;
}
