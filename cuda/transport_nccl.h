// The NCCL transport: messages between pipeline stages on different GPUs go from device to
// device with ncclSend/ncclRecv, and the gradient sum over replicas with ncclAllReduce, on
// streams of their own that CUDA events order against the backend's compute stream. The host
// scalars stay on the inner (MPI) transport; a link whose ranks share a GPU (NCCL cannot connect
// those) goes through transport_staged. No MPI here: mpi/nccl_setup.c chooses the links and
// hands out the communicators' ids.
#ifndef FGPIPE_TRANSPORT_NCCL_H
#define FGPIPE_TRANSPORT_NCCL_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "transport.h"

enum { NCCL_ID_BYTES = 128, NCCL_GPU_NAME_BYTES = 64 };
typedef struct { unsigned char bytes[NCCL_ID_BYTES]; } NcclId;  // an ncclUniqueId

// The links of one rank (stage s of replica r) that go through NCCL, and their communicators'
// ids. The link between stages s and s+1 has one communicator per direction (FORWARD carries
// activations up, BACKWARD adjoints down), so each is a FIFO that only one side sends into:
// NCCL has no tags, and messages of one direction match in the order they were sent.
enum { NCCL_FORWARD = 0, NCCL_BACKWARD = 1 };
typedef struct {
    int prev, next, replicas;  // 1: the link to s-1 / to s+1 / among the R replicas is NCCL's
    NcclId to_prev[2];         // the ids of the link to s-1 ([NCCL_FORWARD], [NCCL_BACKWARD])
    NcclId to_next[2];         // the same for the link to s+1
    NcclId replica;            // the communicator of the R replicas of stage s (rank = replica)
} NcclWiring;

// The GPU a CUDA backend runs on, as "GPU-<uuid>" (the same GPU has the same name in every
// process of a host), to tell whether two ranks share one.
int transport_nccl_gpu_name(const Backend *be, char name[NCCL_GPU_NAME_BYTES], FgError *err);
// A new communicator id (ncclGetUniqueId): one rank makes it, the others receive a copy.
int transport_nccl_new_id(NcclId *id, FgError *err);
// Makes the transport of this rank over `be` (a CUDA backend); `inner` (host memory, MPI)
// carries the scalars and the links that are not NCCL's, and stays the caller's. Collective:
// every rank of each NCCL link calls it. Blocks until the communicators are connected.
int transport_nccl_create(Transport inner, const Backend *be, const NcclWiring *w, Transport *out,
                          FgError *err);
// Waits for the communication in flight, then frees the communicators and buffers.
void transport_nccl_destroy(Transport *t);

#ifdef __cplusplus
}
#endif

#endif
