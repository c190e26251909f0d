// One pipeline stage at run time: executes its part of the step's timetable (ops F, B, U),
// exchanging activations, tangents and adjoints with its neighbours through a Transport.
// With one stage and transport_local() this is the single-rank trainer; nothing else is.
#ifndef FGPIPE_PIPELINE_H
#define FGPIPE_PIPELINE_H

#include "config.h"
#include "data.h"
#include "layer_stream.h"
#include "model.h"
#include "optimizer.h"
#include "schedule.h"
#include "stage.h"
#include "transport.h"

// Splits the model's layers into M contiguous stages: first[s] is stage s's first layer,
// first[M] = n_layers. `boundaries` lists first[1..M-1] ("2,4,6"), or is "auto": balance the
// parameter counts (the GEMM work) by minimising the largest stage.
int partition_layers(const Model *m, int M, const char *boundaries, int *first, FgError *err);

typedef struct {
    double loss;        // mean loss of the step's micro-batches (valid on every stage)
    double seconds;     // wall time of the step on this stage
    // With Pipeline.want_stats (docs/log.md; NaN where not defined this step):
    double estimate_norm, exact_norm, cos_estimate_exact, cos_fg_exact, variance_reduction;
} StepResult;

// A stage's state as host memory, for checkpoints (the buffers themselves on the CPU).
typedef struct {
    float *params, *opt_state, *guide;
} HostState;

// An out-of-core stage's streams and wave buffers (pipeline_stream.c).
typedef struct OutOfCore OutOfCore;

typedef struct {
    const Backend *be;        // every float buffer below is its memory unless marked host
    const Config *cfg;
    const Model *model;
    Transport *tr;
    const Dataset *data;      // training set: stage 0 reads inputs, the last stage labels
    Stage stage;
    Schedule sched;
    int is_first, is_last;
    int K;                    // tangents (0 in bp)
    int n_sel;                // micro-batches backpropagated per step
    size_t n;                 // parameters of this stage
    OutOfCore *ooc;           // the stage streams its layers (mem_budget); then the stage-sized
                              // buffers below (params ... guide, host) are NULL
    float *params, *grad, *opt_state;
    float *exact;             // fg+bp: the exact gradient c of the selected micro-batches
    float *prev_params;       // lag 1: the weights the stashed activations were computed with
    float *guide;             // guided: c/|c| of the last step that had c
    float *msg_in[2];         // received messages, double-buffered: (h, hdot) or an adjoint
    float *msg_out;           // the message being sent
    float *x_in;              // stage 0: one micro-batch of inputs
    uint8_t *labels;          // last stage: one micro-batch of labels
    float *host_x;            // host: x_in as gathered from the dataset
    uint8_t *host_labels;     // host: labels as gathered
    HostState host;           // see pipeline_state_to_host
    float *dz[2];             // last stage: loss adjoints of selected micro-batches, per parity
    float *stash[2][SCHED_MAX_MICROBATCHES];  // live stashes by (step parity, micro-batch)
    float **free_stash;       // reusable stash buffers
    int n_free_stash, n_stash_alloc;
    double *scalars;          // host: loss, d_{b,k}, per-layer c.v_{b,k}: one allreduce per step
    float *coeff;             // host
    double *measured;         // [n_ops of the schedule][2]: start, end of the last step's ops
    long first_step;          // the run's first step (a resumed run's is > 0)
    int want_stats;           // fill the StepResult statistics (costs allreduces and, with c,
                              // one more tangent pass); the same on every stage
    float *scratch;           // want_stats: the plain fg estimate
    StepResult stats;         // of the last update
} Pipeline;

// Builds the stage for transport t's stage, measures op costs in a warm-up and builds the
// timetable (identical on every stage). A stage that does not fit cfg->mem_budget keeps its
// layers in a store under cfg->weights_dir through `streams` (NULL: refused); resuming from
// those stores (streams->resume) sets p->first_step.
int pipeline_init(Pipeline *p, const Backend *be, const Config *cfg, const Model *m,
                  const int *first, Transport *t, const Dataset *train,
                  const LayerStreams *streams, FgError *err);
// Returns the first error of closing the stage's layer stores (their last writes).
int pipeline_free(Pipeline *p, FgError *err);

// Out of core, the last step's forward-gradient update waits for the next step to read each
// layer: this applies it now (before the weights are evaluated or saved). In memory, nothing.
int pipeline_apply_pending(Pipeline *p, FgError *err);

// Calls visit for every layer of the stage with parameters, in order, with the layer's slices
// of the checkpoint's buffers: parameters, optimizer state, guide. In memory these are p->host's
// (pipeline_state_to_host before, pipeline_state_from_host after writing). Out of core they are
// one slot at a time, after any pending update; writable: the visited values become the store's
// next version, on which step next_step runs (a resume from a checkpoint).
int pipeline_visit_layers(Pipeline *p, int writable, long next_step, LayerVisitor visit, void *arg,
                          FgError *err);

// Copies params, optimizer state and guide between the backend and p->host (no-ops on the CPU,
// where p->host points at the buffers): before a checkpoint is written, after one is read.
int pipeline_state_to_host(Pipeline *p, FgError *err);
int pipeline_state_from_host(Pipeline *p, FgError *err);

// One optimizer step on samples order[sample0 ..) of the epoch's order.
int pipeline_step(Pipeline *p, long step, long total_steps, const size_t *order, size_t sample0,
                  StepResult *out, FgError *err);

// Mean loss and accuracy over a dataset, streamed through the pipeline (all stages get them).
int pipeline_evaluate(Pipeline *p, const Dataset *ds, double *loss, double *acc, FgError *err);

#endif
