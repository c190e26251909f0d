// How a pipeline stage talks to its neighbours: point-to-point messages of bytes between stages
// and one small sum over all stages per step. A message's values have their element type
// (FP32, or BF16 activations, tangents and adjoints: two bytes each). With R data-parallel
// replicas (an M x R grid of ranks) it also sums over the replicas: the step's scalars over
// the whole grid, and the gradient buffers of one stage over its replicas (non-blocking, so the
// sum runs while the stage works or idles). mpi/ implements it with MPI; a single stage uses transport_local(),
// which never sends.
#ifndef FGPIPE_TRANSPORT_H
#define FGPIPE_TRANSPORT_H

#include <stddef.h>

#include "common.h"

enum { TRANSPORT_MAX_POSTED = 4 };

typedef struct Transport Transport;
struct Transport {
    void *ctx;
    int stage, stages;  // this rank's stage and the pipeline length M
    int replica, replicas;  // this rank's data-parallel replica and their number R (1: none)
    int device_memory;  // 1: send/recv buffers are a device backend's memory (NCCL, staged)
    int shares_cores;   // 1: on some node the job has more ranks than cores, so timings
                        // taken on every rank at once measure their contention
    // Sends `bytes` bytes to another stage. buf may be reused as soon as the call returns.
    int (*send)(Transport *t, int to_stage, int tag, const void *buf, size_t bytes, FgError *err);
    // Receives exactly `bytes` bytes sent with this tag; a message of another size is an error.
    int (*recv)(Transport *t, int from_stage, int tag, void *buf, size_t bytes, FgError *err);
    // The same in two halves, so a receive can be posted before it is needed: buf must not be
    // touched until wait_recv(handle) returns. At most TRANSPORT_MAX_POSTED at once.
    int (*post_recv)(Transport *t, int from_stage, int tag, void *buf, size_t bytes, int *handle,
                     FgError *err);
    int (*wait_recv)(Transport *t, int handle, FgError *err);
    // buf[i] = sum over the stages of their buf[i], on every stage.
    int (*allreduce_sum)(Transport *t, double *buf, int n, FgError *err);
    // buf[i] = sum over every rank of the grid (all stages of all replicas), on every rank.
    int (*allreduce_sum_world)(Transport *t, double *buf, int n, FgError *err);
    // Starts buf[i] = sum over the replicas of this stage of their buf[i], in place: buf must
    // not be touched until wait_replica_sum returns. One at a time.
    int (*start_replica_sum)(Transport *t, float *buf, size_t n, FgError *err);
    int (*wait_replica_sum)(Transport *t, FgError *err);
};

// The one-stage pipeline of one replica: nothing to send, sums are the local values.
Transport transport_local(void);

// Stage `stage` of `stages` (replica `replica` of `replicas`) timed alone, in host memory: sends
// go nowhere, receives and sums are made-up values, never zero (op U's estimate runs). For the
// start-up's timing of the engine's own ops (op_timing.c), not for training.
Transport transport_timing(int stage, int stages, int replica, int replicas);

#endif
