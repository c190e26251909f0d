// One node, one copy (DESIGN section 6, docs/out-of-core.md "Replicas"): the slots of a
// streamed stage's stores in one block of memory that every replica of the stage on the node
// maps (NodeShare, implemented by mpi/). The node's I/O rank owns the stores: it reads a layer
// into a slot, publishes where the layer's buffers are, and every rank of the group takes the
// same view at its own address. The streamed layer source (source_streamed.c) decides when.
#ifndef FGPIPE_SLOT_SHARE_H
#define FGPIPE_SLOT_SHARE_H

#include <stddef.h>

#include "common.h"
#include "layer_stream.h"

enum { SHARE_WEIGHTS, SHARE_STEP, SHARE_STORES };

typedef struct {
    NodeShare *node;
    int io;                             // this rank is the node's I/O rank for the stage
    unsigned char *base;                // this rank's view of the block
    size_t slots_off[SHARE_STORES];     // where each store's slots start in the block
    size_t slots_bytes[SHARE_STORES];
} SlotShare;

// The block for two stores' slots (weights, step; 0 bytes: none), collective over the group.
int slot_share_open(SlotShare *sh, NodeShare *node, const size_t bytes[SHARE_STORES], FgError *err);
// The I/O rank's slot memory of a store (NULL on the other ranks, and for a store of 0 bytes).
void *slot_share_memory(const SlotShare *sh, int store);
// The I/O rank: where the acquired layer of a store lies, for the others to see after the next
// barrier. The others: that layer's view at their own address.
void slot_share_publish(SlotShare *sh, int store, const LayerView *v);
void slot_share_view(const SlotShare *sh, int store, LayerView *v);
int slot_share_barrier(SlotShare *sh, FgError *err);
// What the group must agree on before it shares a store, and whether it does: every rank
// gets the I/O rank's; a rank whose own differs fails, naming the store and what differs.
typedef struct {
    int64_t first, last, n_weights, n_step, n_slots, largest, params, resume, seed, mode, optimizer;
} ShareTerms;
int slot_share_agree(SlotShare *sh, const ShareTerms *mine, const char *store, FgError *err);
// The I/O rank's outcome of rc and `bytes` of data after it (e.g. a store's version) to every
// rank of the group: the others fail when it failed.
int slot_share_outcome(SlotShare *sh, int rc, void *data, size_t bytes, const char *store, FgError *err);
void slot_share_close(SlotShare *sh);

#endif
