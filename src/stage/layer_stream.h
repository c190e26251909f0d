// Streaming a stage's layers through a few host buffers (out-of-core stages, docs/design.md section 8).
//
// A stage whose parameters and optimizer state do not fit its memory budget keeps them in a
// store on local flash and holds only `slots` layers in memory. The stream reads layers ahead
// and writes updated layers back on its own I/O thread, so compute overlaps the disk. Shaped for
// layer-major waves: for l in the stage's layers: prefetch(l+1); acquire(l); run every
// micro-batch of the wave through l; release(l, dirty).
//
// A layer's memory is its store slot: n_bufs buffers (params, then optimizer state: Adam m, v;
// then the estimator's reference c) of `count` floats each, host memory aligned for
// direct I/O. Versions count the updates a layer has received; releasing a layer dirty writes
// it back as version + 1, and a crash at any moment leaves a store that reopens at the state
// after some whole step (all layers at one version). The implementation
// (io/layer_stream_store.c) is the only part that knows files.
#ifndef FGPIPE_LAYER_STREAM_H
#define FGPIPE_LAYER_STREAM_H

#include <stddef.h>

#include "common.h"
#include "model.h"

typedef struct {
    int layer;          // global layer index
    size_t count;       // floats per buffer
    int n_bufs;         // params + optimizer state (+ reference) buffers
    float *buf[4];      // buf[0]: params, then optimizer state, then the reference (cv, guided)
    size_t first;       // a row block: the layer's float at buf[b][0] (0: the whole layer)
    long version;       // updates applied so far
    int bf16;           // buf[0] holds count BF16 values as on flash, not floats (a frozen base
                        // whose only reads are BF16 GEMMs: LayerStreamSpec.slot16)
} LayerView;

// What the stream's I/O threads did so far: bytes and the seconds spent moving them (reads and
// writes may overlap: busy_seconds is the time with any request running), the CPU time that
// took (the kernel's share of direct I/O: it competes with compute for cores), and how long
// callers waited in acquire for a layer that was not in memory yet.
typedef struct {
    double read_bytes, read_seconds, write_bytes, write_seconds, busy_seconds, cpu_seconds,
        wait_seconds;
} LayerStreamStats;

// a - b, field by field (the I/O of an interval between two readings).
static inline LayerStreamStats layer_stream_stats_sub(LayerStreamStats a, LayerStreamStats b) {
    return (LayerStreamStats){a.read_bytes - b.read_bytes, a.read_seconds - b.read_seconds,
                              a.write_bytes - b.write_bytes, a.write_seconds - b.write_seconds,
                              a.busy_seconds - b.busy_seconds, a.cpu_seconds - b.cpu_seconds,
                              a.wait_seconds - b.wait_seconds};
}

typedef struct LayerStream LayerStream;
struct LayerStream {
    void *ctx;
    int n_slots;            // layers resident at most (large and small slots)
    size_t slot_bytes;      // bytes of a large slot (the largest layer's)
    size_t small_slot_bytes;  // bytes of a slot of the next class (0: none)
    long version;           // the store's consistent version when the stream was opened
    char note[384];         // "" or why I/O goes through the page cache (no O_DIRECT)

    // Starts reading layer ahead of its use if a slot is free (never blocks, never evicts a
    // layer that is pinned or read ahead but not yet acquired); a resident layer is kept, as
    // one read ahead is, until its acquire.
    int (*prefetch)(LayerStream *s, int layer, FgError *err);
    // Waits until layer is in memory (and any write-back of its slot is done) and pins it.
    // Acquiring a resident layer again (bp's backward pass) reads nothing.
    int (*acquire)(LayerStream *s, int layer, LayerView *view, FgError *err);
    // Unpins; dirty: the contents become version + 1 and are written back asynchronously.
    int (*release)(LayerStream *s, int layer, int dirty, FgError *err);
    // A layer in row blocks (Layer.block_rows; a slot holds one block) is read, pinned and
    // written back a block at a time, the blocks of a version in ascending order; the layer has
    // the version once its last block is written. Its acquire is refused; its prefetch reads
    // its block 0. A layer without blocks is block 0. bufs: the layer's leading buffers the
    // pass reads (1: its parameters, the optimizer state left on flash, which a pass that does
    // not step it never reads; 0: all); a slot acquired again with more reads the rest alone,
    // and view->n_bufs says how many it holds. Only a slot holding all is released dirty.
    int (*prefetch_block)(LayerStream *s, int layer, int block, int bufs, FgError *err);
    int (*acquire_block)(LayerStream *s, int layer, int block, int bufs, LayerView *view, FgError *err);
    // prefetch_block when no read is queued or running (else nothing): a read far ahead that
    // would delay the reads the wave needs sooner waits until the disk has nothing else to do.
    int (*prefetch_when_idle)(LayerStream *s, int layer, int block, int bufs, FgError *err);
    // Whether the block has a slot: resident, or being read (a prefetch found it one).
    int (*in_slot)(LayerStream *s, int layer, int block);
    int (*release_block)(LayerStream *s, int layer, int block, int dirty, FgError *err);
    // The auxiliary record of a version (e.g. the scalars of the pending forward-gradient
    // update), written before the first layer of that version; read_aux returns the one of
    // the version the stream opened at.
    int (*write_aux)(LayerStream *s, long version, const void *data, FgError *err);
    int (*read_aux)(LayerStream *s, void *data, FgError *err);
    // Waits for every queued read and write-back; returns the first I/O error, if any. After
    // an error every call fails with it; the store keeps its last consistent version.
    int (*flush)(LayerStream *s, FgError *err);
    void (*stats)(LayerStream *s, LayerStreamStats *out);
    // Flushes, stops the I/O thread, frees the slots and closes the store (a staged store
    // never published is removed: the old one of its name stays).
    int (*close)(LayerStream *s, FgError *err);
    // A store made staged (LayerStreamSpec.staged) takes its name once the run is accepted;
    // nothing for any other.
    int (*publish)(LayerStream *s, FgError *err);
};

// A stream's slots by size (slot_plan.h decides them): n[0] slots of its largest unit (a layer,
// or a row block), then for each k >= 1, n[k] slots for the units of at most count[k] floats a
// buffer (count descending; n[k] 0: none). A unit takes the smallest slot it fits, so the small
// layers cycle through their own slots and read far ahead in little memory.
enum { SLOT_CLASSES = 3 };
typedef struct {
    int n[SLOT_CLASSES];
    size_t count[SLOT_CLASSES];
} SlotClasses;

// What a stage asks for when it goes out of core: a store of its layers [first, last) with
// n_bufs buffers per layer, made new or reopened, and a stream over it with n_slots slots.
// Where a store keeps the model's frozen layers (freeze, a LoRA base): like the others; read-only
// (their parameters alone, no optimizer state, never written by a step: the weights store);
// or not at all (what only trained layers have: the step store).
enum { STORE_FROZEN_AS_OTHERS, STORE_FROZEN_READ_ONLY, STORE_FROZEN_SKIP };

typedef struct {
    const char *dir, *name;    // the store is DIR/NAME.*
    const Model *model;
    int first, last;
    int n_bufs;                // 1 + optimizer state buffers, or 1 (a gradient)
    size_t aux_bytes;          // per-version record
    int fill_weights;          // a new store: buffer 0 holds the model's initial weights (seed),
    uint32_t seed;             // everything else zeros
    int later_bufs;            // buffers per layer of the stores made after this one (the step
                               // store): a new store checks the flash has room for all of them,
    double later_bytes;        // and for these bytes of spill files (the tied copies')
    int frozen;                // the model's frozen layers (STORE_FROZEN_*)
    int tied_once;             // the model's tied copies (both in [first, last)) kept once: the
                               // store has no tied_last, whose reader takes tied_first's
    int staged;                // a new store is made beside an old one of its name and replaces
                               // it only at publish: a run refused before leaves the old whole
    int reopen;                // 1: open the existing store instead of making a new one,
    long version;              //    at this version (-1: its consistent version)
    SlotClasses slots;
    const unsigned char *slot16;  // per model layer (NULL: none): 1 when its slot holds its
                               // BF16 values as on flash, never widened (a frozen layer kept in
                               // BF16 whose only reads are BF16 GEMMs: slot_plan.h)
    void *slot_memory;         // NULL: the stream allocates its slots; else its slots (the large
    size_t slot_memory_bytes;  // ones, then the small ones) in this 4 KiB-aligned block (a node's
                               // shared memory: NodeShare), which the caller frees after close
} LayerStreamSpec;

// The replicas of one stage that run on one node share one store (docs/out-of-core.md,
// "Replicas"): its slots are one block of memory every one of them maps, and the node's I/O rank
// (the lowest of those replicas) alone reads, updates and writes the layers. mpi/ implements it
// with MPI-3 shared memory; every call is collective over the stage's replicas on the node.
typedef struct NodeShare NodeShare;
struct NodeShare {
    void *ctx;
    int rank, size;    // this rank among the stage's replicas on its node (0: the I/O rank), and
                       // their number
    int node;          // the node's index among the nodes that hold a replica of this stage
    // The block of `bytes` the I/O rank asks for (the others pass 0): *base is this rank's view
    // of it (the same memory on every rank, at its own address). One block at a time; freed by
    // free_shared.
    int (*alloc_shared)(NodeShare *n, size_t bytes, unsigned char **base, FgError *err);
    void (*free_shared)(NodeShare *n);
    // Every rank of the group has reached this point, and every write to the block before it
    // is seen by every rank after it.
    int (*barrier)(NodeShare *n, FgError *err);
    // bytes of buf from the I/O rank to the others.
    int (*bcast)(NodeShare *n, void *buf, size_t bytes, FgError *err);
    // *flag = the smallest of the group's flags, on every rank.
    int (*all)(NodeShare *n, int *flag, FgError *err);
};

// A scratch file on local flash for what a step hands from one wave to a later one and the
// budget has no room to keep (the tied embedding's gradients, docs/out-of-core.md): regions of
// given sizes, written and read synchronously in pieces of any length that start at multiples
// of SPILL_ALIGN_FLOATS. Removed at close; never reopened (a resumed run starts a new step).
enum { SPILL_ALIGN_FLOATS = 1024 };
typedef struct LayerSpill LayerSpill;
struct LayerSpill {
    void *ctx;
    int (*write)(LayerSpill *s, int region, size_t first, const float *buf, size_t n, FgError *err);
    int (*read)(LayerSpill *s, int region, size_t first, float *buf, size_t n, FgError *err);
    // Bytes and seconds so far; the caller waited all of them (busy_seconds = wait_seconds).
    void (*stats)(LayerSpill *s, LayerStreamStats *out);
    void (*close)(LayerSpill *s);
};

// How a pipeline reaches local flash (the io/ library through mpi/main.c; NULL: it cannot).
typedef struct {
    void *arg;
    int (*open)(void *arg, const LayerStreamSpec *spec, LayerStream *out, FgError *err);
    // DIR/NAME.spill with n_regions regions of floats[i] floats (NULL: no spill files; the
    // engine keeps such buffers in memory).
    int (*open_spill)(const char *dir, const char *name, int n_regions, const size_t *floats,
                      LayerSpill *out, FgError *err);
    // One run per store (NULL: no locks): takes DIR/NAME.lock before the store is touched,
    // refusing one that a live run holds; released at close.
    int (*lock)(const char *dir, const char *name, int *handle, FgError *err);
    void (*unlock)(const char *dir, const char *name, int handle);
    int resume;                // continue from the stores already in weights_dir
    NodeShare *share;          // NULL: every replica keeps its own stores
} LayerStreams;

#endif
