// Where a stage's per-layer buffers live: one interface for a stage that holds all its layers
// in memory (resident) and one that streams them from local flash through a few slots
// (streamed, docs/out-of-core.md). The step engine (pipeline*.c) sees only this interface, so
// every op, update, checkpoint and statistic is written once for both.
//
// A layer's buffers come in two parts with different lifetimes:
//  - LAYER_WEIGHTS: parameters, optimizer state and the estimator's reference (fg+bp): the
//    state of the run, saved in checkpoints and (streamed) versioned for crash recovery;
//  - LAYER_STEP: what a step hands to the next one: the update's gradient (c of fg+bp, or bp's
//    gradient when the update must wait for a global norm) and the weights before the last
//    update, and the one before (ops with lag 1 and 2 differentiate at the weights their
//    stash was made with). Rebuilt every step, never saved.
// The gradient accumulator (what B ops add into) is always memory: the stage's whole buffer
// (resident), or one layer's (streamed: its B ops run layer-major, one layer at a time).
#ifndef FGPIPE_LAYER_SOURCE_H
#define FGPIPE_LAYER_SOURCE_H

#include <stddef.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "layer_stream.h"
#include "mem_account.h"
#include "model.h"
#include "transport.h"

// LAYER_FLOATS, with LAYER_WEIGHTS: params as floats also where a streamed layer's slot holds
// BF16 (a frozen base, slot_plan.h's slot16; widened into a buffer of the source's and narrowed
// back when released dirty): for the readers and writers of floats (checkpoints, loads), not
// the step's GEMMs, which read params16.
// LAYER_PARAMS_ONLY, with LAYER_WEIGHTS: the pass reads the parameters alone (state and ref
// NULL): a streamed layer's optimizer state and reference stay on flash, a third of an AdamW
// layer's bytes read where the pass does not step it (update_plan.c decides which).
enum { LAYER_WEIGHTS = 1, LAYER_STEP = 2, LAYER_FLOATS = 4, LAYER_PARAMS_ONLY = 8, LAYER_MAX_LAG = 2 };

// One layer's buffers, each of the layer's param_count floats (NULL: not in this run), or of a
// row block of it: floats [first, first + count) of each (Layer.block_rows; layer_block).
typedef struct {
    size_t first, count;
    float *params;
    const uint16_t *params16;  // the BF16 copy of params that the GEMMs read (LayerNeeds.weights16,
                               // layer_has_weights16; NULL: none), refreshed by the source
                               // whenever a release (resident) or an acquire (streamed) finds
                               // the weights written, or refresh16 says so; or, a streamed
                               // layer whose slot holds BF16, that slot (params NULL then,
                               // unless LAYER_FLOATS)
    float *state;          // optimizer state buffers, state_stride floats apart
    size_t state_stride;
    float *ref;            // fg+bp's reference, the last step's c: as is (cv), or c/|c| (guided)
    float *grad;           // B ops add into it (bp: the gradient; fg+bp: c)
    float *update_grad;    // the gradient the next update reads: grad itself (resident), or
                           // its copy in the step store (streamed)
    float *prev[LAYER_MAX_LAG];  // prev[j]: the weights of j + 1 steps ago (lag j + 1)
    const uint16_t *prev16[LAYER_MAX_LAG];  // prev[j]'s BF16 copy, where it has one: a layer
                           // that does not train (frozen), whose earlier weights are its
                           // weights (params16); NULL: lagged GEMMs round prev[j] per call
} LayerSlot;

typedef struct LayerSource LayerSource;
struct LayerSource {
    void *ctx;
    int streamed;          // layers pass through slots: the stage runs layer-major waves and
                           // applies each update when the next wave reads the layer
    // Resident only (NULL when streamed): every layer's gradient in one stage-sized buffer,
    // so one sum over the replicas covers the stage.
    float *stage_grad;
    // Streamed only: the one layer-sized memory buffer of the stage, the B wave's gradient
    // accumulator; between B waves (once update_finish_layer_gradient has set each layer's update_grad) the
    // engine forms updates in it.
    float *layer_buffer;
    // Streamed only: the op-U gradient (bp) or estimate (fg, fg+bp) of each copy of a tied
    // embedding the stage holds ([0]: model tied_first's, [1]: tied_last's; NULL: none here).
    // The copies are summed in op U, so their gradients stay in memory from the wave that
    // makes them to the update (docs/gpt.md).
    float *tied_grad[2];
    // Or, where the streams offer spill files (a CPU stage; each replica its own), on flash:
    // region i of tied_spill holds what tied_grad[i] would (tied_grad NULL then).
    LayerSpill *tied_spill;
    // Streamed only: the tied copies are one in the store (bp, both on this stage): the head
    // reads the embedding's, and the embedding's step alone writes it (slot_plan.h's twin).
    int tied_once;
    // Streamed only: how many layers past the one computing may be read ahead (slots - 1).
    int read_ahead;
    // Streamed with two slot sizes only (NULL: one size): per model layer, 1 where it takes a
    // large slot (slot_plan_large), which the next of them is read into as soon as a large slot
    // is free and the disk has nothing nearer to read (prefetch_when_idle).
    const unsigned char *large;
    // Each call names a row block of the layer (layer_block: a layer without blocks is its
    // block 0). A streamed layer in blocks holds one block in a slot and its blocks of a version
    // are written in ascending order; its gradient accumulator (layer_buffer) is a block's.
    // Starts reading a layer that will be acquired soon (no-op when resident).
    int (*prefetch)(LayerSource *s, int layer, int block, unsigned parts, FgError *err);
    // The same when no read is queued or running, else nothing (streamed only).
    int (*prefetch_when_idle)(LayerSource *s, int layer, int block, unsigned parts, FgError *err);
    // Whether the layer's block has its slots (resident or being read); always, where nothing
    // streams. A read-ahead stops at the first that has not, so that reads go in the wave's
    // order: a later layer's read never delays an earlier one's.
    int (*in_slot)(LayerSource *s, int layer, int block, unsigned parts);
    // The layer's buffers for `parts` (the others stay NULL); pinned until release.
    int (*acquire)(LayerSource *s, int layer, int block, unsigned parts, LayerSlot *out, FgError *err);
    // Unpins the parts acquire pinned; dirty: those whose buffers were written.
    int (*release)(LayerSource *s, int layer, int block, unsigned parts, unsigned dirty, FgError *err);
    // The acquired layer's weights were written while pinned and are read before release (a
    // streamed stage's update, applied as the forward wave acquires the layer): their BF16 copy
    // made again now (nothing where the run has none).
    void (*refresh16)(LayerSource *s, int layer, int block, const LayerSlot *slot);
    // Weights written from now on belong to the state on which step next_step runs.
    int (*begin_version)(LayerSource *s, long next_step, FgError *err);
    // Resident (NULL when streamed, whose slots are copied): before an update of every layer,
    // the weights become prev[0] and each prev[j] prev[j + 1] by swapping buffers, not
    // copying them; params is then free for the update to write from prev[0]. Called only
    // when previous versions are kept.
    void (*age_weights)(LayerSource *s);
    // Waits for every write; returns the first I/O error.
    int (*flush)(LayerSource *s, FgError *err);
    // Streamed, once the run is accepted (every input checked, the outputs open): a new
    // weights store replaces the old one of its name, and its settings record is written
    // (store_settings.h). NULL or nothing to do: resident, or a reopened store.
    int (*publish)(LayerSource *s, FgError *err);
    // One line of statistics on stderr (streamed: bytes moved, waits), or nothing.
    void (*report)(LayerSource *s, const char *who);
    // Streamed only: the I/O so far, both stores and the spill file (tied_spill) together.
    void (*io_stats)(LayerSource *s, LayerStreamStats *out);
    // Streamed only: bytes of the stores on flash, and what the stage holds in memory besides
    // the slots (activations, lanes, one layer's gradient).
    double flash_bytes, work_bytes;
    // The source's own memory by owner (mem_account.h), set when it opens: resident, the
    // weights (and versions held for lagged ops), gradient, reference and optimizer state of
    // every layer, the tied table's second copy apart; streamed, the slots mem_budget leaves
    // after the work and the runtime, and one layer's gradient.
    double held[N_MEM_OWNERS];
    // Streamed, replicas on one node sharing one store per stage (LayerStreams.share): the
    // others' acquire and release are collective over the stage's replicas on the node, and
    // only the node's I/O rank changes a layer: reads_only on the others, whose dirty flags
    // are ignored. NULL sync and solo: not shared.
    int reads_only;
    // Every replica of the node reaches this point: after the I/O rank changed an acquired
    // layer (its update) before the others read it, or before it changes one they read.
    int (*sync)(LayerSource *s, FgError *err);
    // on: from here the I/O rank acquires alone (replica 0's checkpoint, evaluation,
    // --save-params) and the others acquire nothing until off; both collective.
    int (*solo)(LayerSource *s, int on, FgError *err);
    // Flushes and frees; returns the first error of the last writes.
    int (*close)(LayerSource *s, FgError *err);
};

// How a layer's BF16 copy rounds its weights (Backend.narrow16's `how`): a base kept in BF16
// (stored_bf16) keeps its own bits, denormals too (as a streamed BF16 slot holds them); other
// weights round as the BF16 GEMM rounds an FP32 operand per call.
static inline int layer_source_how16(const Layer *L) {
    return BF16_WEIGHTS | (L->stored_bf16 ? BF16_KEEP_DENORMALS : 0);
}

// Which bound a streamed stage's step is on, from its I/O over `steps` steps that took
// `seconds`: compute is the time not spent waiting for layers; I/O the time with any read or
// write running; the flash's bandwidths are bytes per second of the read (write) thread's own
// busy time. The I/O overlaps compute, so a step takes at least the larger of compute and I/O;
// flash_bound when I/O is the larger.
typedef struct {
    double read_bytes, write_bytes;  // per step
    double compute_seconds, io_seconds;  // per step
    double needed_bandwidth;         // bytes per second that keep compute busy: moved / compute
    double read_bandwidth, write_bandwidth;  // measured
    int flash_bound;
} IoBound;
IoBound layer_io_bound(const LayerStreamStats *delta, double seconds, int steps);

// All layers [first, last) of the model in the backend's memory, params initialised from the
// seed, everything else zero.
int layer_source_resident(const Backend *be, const Config *c, const Model *m, int first, int last,
                          LayerSource *out, FgError *err);

// The layers [first, last) in stores under cfg->weights_dir opened through `streams`, with as
// many slots as cfg->mem_budget leaves after work_bytes and runtime_bytes (the process's own,
// mem_account.h; at least two, or an error naming the budget). streams->resume reopens the
// stores at the newest version every rank of the grid holds (one sum over the grid) and sets
// *next_step; otherwise *next_step is 0.
int layer_source_streamed(const Backend *be, const Config *c, const Model *m, int first, int last,
                          Transport *t, const LayerStreams *streams, double work_bytes,
                          double runtime_bytes, LayerSource *out, long *next_step, FgError *err);

// The least memory a streamed stage of layers [first, last) holds besides its activations:
// its smallest set of slots (layer_source_streamed refuses a budget without room for them;
// the tied copies' gradients wait on flash, tied_spill, except on a device).
double layer_source_streamed_floor(const Config *c, const Model *m, int first, int last);
// Parameters of layers [first, last) in a streamed stage's weights store: the tied head's are
// not there when the stage keeps the tied copies once (LayerSource.tied_once).
size_t layer_source_streamed_params(const Config *c, const Model *m, int first, int last);

#endif
