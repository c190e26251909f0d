// The Transport of a stage timed alone at start-up (transport_timing(), transport.h; op_timing.c
// in the engine): its neighbours are not running, so what it sends goes nowhere, what it receives
// and the step's sums are made up here. An op's cost does not depend on the values, with one
// exception: op U skips the estimate when every derivative is zero, so the sums are never zero.
#include <string.h>

#include "bf16.h"
#include "transport.h"

// Small values in [-1/64, 1/64], the same every time: finite through any layer. A message holds
// FP32 or BF16 values, so each 4-byte word is one such value in BF16 twice: read as a float it
// is the value (to BF16's precision), read as two BF16 numbers it is the value twice.
static void make_up(void *buf, size_t bytes) {
    unsigned char *b = buf;
    for (size_t i = 0; i < bytes / 2; i++) {
        uint16_t h = bf16_round((float)((int)(i / 2 * 7919u % 129u) - 64) / 4096.0f);
        memcpy(b + 2 * i, &h, sizeof h);
    }
}

static int timing_send(Transport *t, int to, int tag, const void *buf, size_t bytes, FgError *err) {
    (void)t, (void)to, (void)tag, (void)buf, (void)bytes, (void)err;
    return FG_OK;
}

static int timing_recv(Transport *t, int from, int tag, void *buf, size_t bytes, FgError *err) {
    (void)t, (void)from, (void)tag, (void)err;
    make_up(buf, bytes);
    return FG_OK;
}

static int timing_post_recv(Transport *t, int from, int tag, void *buf, size_t bytes, int *handle,
                            FgError *err) {
    *handle = 0;
    return timing_recv(t, from, tag, buf, bytes, err);
}

static int timing_wait_recv(Transport *t, int handle, FgError *err) {
    (void)t, (void)handle, (void)err;
    return FG_OK;
}

static int timing_sum(Transport *t, double *buf, int n, FgError *err) {
    (void)t, (void)err;
    for (int i = 0; i < n; i++) buf[i] = 1e-3;
    return FG_OK;
}

static int timing_replica_sum(Transport *t, float *buf, size_t n, FgError *err) {
    (void)t, (void)buf, (void)n, (void)err;
    return FG_OK;
}

static int timing_wait_replica_sum(Transport *t, FgError *err) {
    (void)t, (void)err;
    return FG_OK;
}

Transport transport_timing(int stage, int stages, int replica, int replicas) {
    Transport t = {.stage = stage, .stages = stages, .replica = replica, .replicas = replicas,
                   .send = timing_send, .recv = timing_recv, .post_recv = timing_post_recv,
                   .wait_recv = timing_wait_recv, .allreduce_sum = timing_sum,
                   .allreduce_sum_world = timing_sum, .start_replica_sum = timing_replica_sum,
                   .wait_replica_sum = timing_wait_replica_sum};
    return t;
}
