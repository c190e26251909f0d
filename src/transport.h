// How a pipeline stage talks to its neighbours: point-to-point float messages between stages
// and one small sum over all stages per step. mpi/ implements it with MPI; a single stage uses
// transport_local(), which never sends.
#ifndef FGPIPE_TRANSPORT_H
#define FGPIPE_TRANSPORT_H

#include <stddef.h>

#include "common.h"

enum { TRANSPORT_MAX_POSTED = 4 };

typedef struct Transport Transport;
struct Transport {
    void *ctx;
    int stage, stages;  // this rank's stage and the pipeline length M
    int device_memory;  // 1: send/recv buffers are a device backend's memory (NCCL, staged)
    // Sends n floats to another stage. buf may be reused as soon as the call returns.
    int (*send)(Transport *t, int to_stage, int tag, const float *buf, size_t n, FgError *err);
    // Receives exactly n floats sent with this tag; a message of another size is an error.
    int (*recv)(Transport *t, int from_stage, int tag, float *buf, size_t n, FgError *err);
    // The same in two halves, so a receive can be posted before it is needed: buf must not be
    // touched until wait_recv(handle) returns. At most TRANSPORT_MAX_POSTED at once.
    int (*post_recv)(Transport *t, int from_stage, int tag, float *buf, size_t n, int *handle,
                     FgError *err);
    int (*wait_recv)(Transport *t, int handle, FgError *err);
    // buf[i] = sum over the stages of their buf[i], on every stage.
    int (*allreduce_sum)(Transport *t, double *buf, int n, FgError *err);
};

// The one-stage pipeline: nothing to send, sums are the local values.
Transport transport_local(void);

#endif
