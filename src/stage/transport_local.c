// The Transport of a run on one stage and one replica (transport_local(), transport.h): no
// neighbours, so a send or receive is an internal error, and the sums are the values themselves.
#include "transport.h"

static int local_send(Transport *t, int to, int tag, const void *buf, size_t bytes, FgError *err) {
    (void)t, (void)buf, (void)bytes;
    return fg_fail(err, FG_ERR_INTERNAL, "single-stage transport asked to send to stage %d (tag %d)",
                   to, tag);
}

static int local_recv(Transport *t, int from, int tag, void *buf, size_t bytes, FgError *err) {
    (void)t, (void)buf, (void)bytes;
    return fg_fail(err, FG_ERR_INTERNAL,
                   "single-stage transport asked to receive from stage %d (tag %d)", from, tag);
}

static int local_post_recv(Transport *t, int from, int tag, void *buf, size_t bytes, int *handle,
                           FgError *err) {
    (void)handle;
    return local_recv(t, from, tag, buf, bytes, err);
}

static int local_wait_recv(Transport *t, int handle, FgError *err) {
    (void)t;
    return fg_fail(err, FG_ERR_INTERNAL, "single-stage transport has no receive %d to wait for", handle);
}

static int local_allreduce(Transport *t, double *buf, int n, FgError *err) {
    (void)t, (void)buf, (void)n, (void)err;
    return FG_OK;
}

static int local_start_replica_sum(Transport *t, float *buf, size_t n, FgError *err) {
    (void)t, (void)buf, (void)n, (void)err;
    return FG_OK;
}

static int local_wait_replica_sum(Transport *t, FgError *err) {
    (void)t, (void)err;
    return FG_OK;
}

Transport transport_local(void) {
    // Never sends, so it carries any backend's buffers.
    Transport t = {.stage = 0, .stages = 1, .replica = 0, .replicas = 1, .device_memory = 1,
                   .send = local_send, .recv = local_recv, .post_recv = local_post_recv,
                   .wait_recv = local_wait_recv, .allreduce_sum = local_allreduce,
                   .allreduce_sum_world = local_allreduce,
                   .start_replica_sum = local_start_replica_sum,
                   .wait_replica_sum = local_wait_replica_sum};
    return t;
}
