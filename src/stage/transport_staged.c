// A host-memory Transport (MPI) carrying messages of a device backend: sends download into a
// host buffer, receives land in host buffers and are uploaded when waited for. Used when no
// device-to-device transport exists between two stages (e.g. both stages on one GPU, where
// NCCL cannot connect them).
#include <stdlib.h>

#include "transport_staged.h"

typedef struct {
    Transport inner;
    const Backend *be;
    void *send_buf;
    size_t send_cap;  // bytes
    struct {
        void *host, *device;
        size_t bytes, cap;
        int inner_handle;
    } recv[TRANSPORT_MAX_POSTED + 1];
    void *sum_host;   // the replica sum in flight: its host copy and destination
    float *sum_device;
    size_t sum_n, sum_cap;  // floats summed; bytes of the host copy
} Staged;

static void *ensure(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        fg_free(*buf);
        *buf = fg_alloc_bytes(bytes);
        *cap = bytes;
    }
    return *buf;
}

static int staged_send(Transport *t, int to, int tag, const void *buf, size_t bytes, FgError *err) {
    Staged *s = t->ctx;
    void *host = ensure(&s->send_buf, &s->send_cap, bytes);
    s->be->download(s->be, host, buf, bytes);
    int rc = s->be->sync(s->be, err);
    return rc ? rc : s->inner.send(&s->inner, to, tag, host, bytes, err);
}

static int staged_post_recv(Transport *t, int from, int tag, void *buf, size_t bytes, int *handle,
                            FgError *err) {
    Staged *s = t->ctx;
    int h = 0;
    while (h < TRANSPORT_MAX_POSTED && s->recv[h].device) h++;
    if (h == TRANSPORT_MAX_POSTED)
        return fg_fail(err, FG_ERR_INTERNAL, "staged transport: more than %d receives posted",
                       TRANSPORT_MAX_POSTED);
    void *host = ensure(&s->recv[h].host, &s->recv[h].cap, bytes);
    int rc = s->inner.post_recv(&s->inner, from, tag, host, bytes, &s->recv[h].inner_handle, err);
    if (rc) return rc;
    s->recv[h].device = buf;
    s->recv[h].bytes = bytes;
    *handle = h;
    return FG_OK;
}

static int staged_wait_recv(Transport *t, int h, FgError *err) {
    Staged *s = t->ctx;
    int rc = s->inner.wait_recv(&s->inner, s->recv[h].inner_handle, err);
    if (!rc) s->be->upload(s->be, s->recv[h].device, s->recv[h].host, s->recv[h].bytes);
    s->recv[h].device = NULL;
    return rc;
}

static int staged_recv(Transport *t, int from, int tag, void *buf, size_t bytes, FgError *err) {
    int h = 0, rc = staged_post_recv(t, from, tag, buf, bytes, &h, err);
    return rc ? rc : staged_wait_recv(t, h, err);
}

static int staged_allreduce(Transport *t, double *buf, int n, FgError *err) {
    Staged *s = t->ctx;
    return s->inner.allreduce_sum(&s->inner, buf, n, err);
}

static int staged_allreduce_world(Transport *t, double *buf, int n, FgError *err) {
    Staged *s = t->ctx;
    return s->inner.allreduce_sum_world(&s->inner, buf, n, err);
}

// The replica sum runs on a host copy: downloaded when it starts, uploaded when waited for.
static int staged_start_replica_sum(Transport *t, float *buf, size_t n, FgError *err) {
    Staged *s = t->ctx;
    float *host = ensure(&s->sum_host, &s->sum_cap, n * sizeof(float));
    s->be->download(s->be, host, buf, n * sizeof(float));
    int rc = s->be->sync(s->be, err);
    if (rc) return rc;
    s->sum_device = buf;
    s->sum_n = n;
    return s->inner.start_replica_sum(&s->inner, host, n, err);
}

static int staged_wait_replica_sum(Transport *t, FgError *err) {
    Staged *s = t->ctx;
    int rc = s->inner.wait_replica_sum(&s->inner, err);
    if (!rc && s->sum_device) s->be->upload(s->be, s->sum_device, s->sum_host, s->sum_n * sizeof(float));
    s->sum_device = NULL;
    return rc;
}

Transport transport_staged(Transport inner, const Backend *be) {
    Staged *s = calloc(1, sizeof *s);
    s->inner = inner;
    s->be = be;
    Transport t = inner;
    t.ctx = s;
    t.send = staged_send;
    t.recv = staged_recv;
    t.post_recv = staged_post_recv;
    t.wait_recv = staged_wait_recv;
    t.allreduce_sum = staged_allreduce;
    t.allreduce_sum_world = staged_allreduce_world;
    t.start_replica_sum = staged_start_replica_sum;
    t.wait_replica_sum = staged_wait_replica_sum;
    t.device_memory = 1;
    return t;
}

void transport_staged_free(Transport *t) {
    Staged *s = t->ctx;
    fg_free(s->send_buf);
    fg_free(s->sum_host);
    for (int h = 0; h <= TRANSPORT_MAX_POSTED; h++) fg_free(s->recv[h].host);
    free(s);
}
