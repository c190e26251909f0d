// What the core stores: checkpoints (what they hold) and the per-step log (one record per
// step), and the interface through which a storage backend (hdf5io/) writes and reads them.
// The core names the tensors and quantities; the backend decides the file format.
//
// A stage contributes its own layers; tensors are addressed by name ("<buffer>/<layer>/<tensor>",
// e.g. params/fc1/weight, optimizer/m/fc1/weight), so a checkpoint written by M stages loads on
// any other number of stages.
#ifndef FGPIPE_STORAGE_H
#define FGPIPE_STORAGE_H

#include <stdint.h>

#include "common.h"
#include "model.h"

enum { CHECKPOINT_MAX_BUFFERS = 4, CHECKPOINT_FORMAT_VERSION = 1 };

// What another program needs to use the weights, stored as attributes of the file's root
// (docs/checkpoints.md): numbers by name, and two texts.
enum { CHECKPOINT_MAX_NUMBERS = 8 };
typedef struct {
    const char *model_kind;   // "mlp", "gpt" or "llama"
    const char *orientation;  // how a linear weight is laid out
    int n_numbers;
    const char *number_names[CHECKPOINT_MAX_NUMBERS];  // "input_mean", "vocab", "ctx", ...
    double numbers[CHECKPOINT_MAX_NUMBERS];
} ModelCard;

// What a stage saves, and where a load puts it. The tensors come layer by layer from
// visit_layers, so a stage that streams its layers from flash passes each through memory once.
typedef struct {
    const Model *model;
    int first, last;           // this stage's layers
    int n_buffers;
    const char *buffers[CHECKPOINT_MAX_BUFFERS];  // "params", "optimizer/m", ...
    // Calls visit for each of the stage's layers with parameters, in order, by ranges of the
    // layer (LayerVisitor: whole, or its row blocks ascending), with bufs[b] the range of the
    // layer's slice of buffers[b]; writable (a load): what visit writes there is kept. A load
    // sets step and seed before it writes.
    int (*visit_layers)(void *source, int writable, LayerVisitor visit, void *arg, FgError *err);
    void *source;
    long step;                 // the next step to run
    uint32_t seed;
    const char *config_text;   // the resolved config (save only)
    ModelCard card;            // (save only)
    int stages;                // the writer's layout (save only)
    const int *layout;         // [stages + 1]
    // The estimator's running sums (cv_scale = auto, cv_scale.h; the same on every rank), or
    // n_cv_sums 0. A load of a checkpoint without them leaves them as they are (no history).
    double *cv_sums;
    int n_cv_sums;
    int adapters_optional;     // a load (--init-from) leaves the LoRA adapters that the
                               // checkpoint lacks (a base model's) at their initial values
} CheckpointState;

// One step of the log (docs/log.md); NaN where a quantity does not exist that step.
typedef struct {
    long step;
    double loss, lr;
    double estimate_norm;       // |g| used for the update, before clipping
    double exact_norm;          // |c| from the bubble B ops
    double cos_estimate_exact;  // cos(g, c)
    double cos_fg_exact;        // cos(plain fg estimate, c)
    double variance_reduction;  // sum d^2 / sum (d - c.v)^2 over the estimated micro-batches
    double step_seconds, makespan, bubble, bubble_used_by_b;
    double cv_beta_median;      // cv_scale = auto: the median over layers of the step's beta_l
    const double *busy_seconds;  // [stages][3]: F, B, U seconds of each stage
    const double *bubble_used_stage;  // [stages]: share of each stage's bubble used by B ops
} StepRecord;

// The run's constants: the attributes of the log and its per-stage plan (each [stages], the
// layout [stages + 1]; see TrainResult).
typedef struct {
    const char *mode, *estimator, *config_text, *layout_by;
    int stages, micro_batches, tangents;
    const int *layout;
    const double *work_ms, *n_corr, *lag, *bubble_used_planned;
    double makespan_vs_fg;
} LogInfo;

typedef struct StepLog StepLog;
struct StepLog {
    void *ctx;
    int (*append)(StepLog *log, const StepRecord *r, FgError *err);
    int (*flush)(StepLog *log, FgError *err);  // at checkpoints: what a resume keeps is on disk
    int (*close)(StepLog *log, FgError *err);  // flushes; the log stays readable after a crash
                                               // up to its last flush
};

typedef struct Storage Storage;
struct Storage {
    void *ctx;
    // Collective over the pipeline's stages: every stage writes its layers. Atomic: the file at
    // path is replaced only once the new one is complete.
    int (*save)(Storage *io, const CheckpointState *st, const char *path, FgError *err);
    // Every stage reads its layers' tensors by name; *step and *seed come back in st. A file that
    // does not match (missing tensor, wrong shape, other format version, not a checkpoint) is
    // refused with FG_ERR_INPUT and a message naming the difference.
    int (*load)(Storage *io, CheckpointState *st, const char *path, FgError *err);
    // The resolved config a checkpoint was written with (allocated text; free() it): what
    // another program needs to rebuild the model.
    int (*load_config)(Storage *io, const char *path, char **text, FgError *err);
    // Sets Layer.stored_bf16 on each frozen layer whose parameters the checkpoint at path holds
    // in BF16 (a Hugging Face import): decided before the stores are made.
    int (*mark_bf16)(Storage *io, const char *path, Model *m, FgError *err);
    // Creates the step log at path (called on one rank: the last stage).
    int (*open_log)(Storage *io, const char *path, const LogInfo *info, StepLog *out, FgError *err);
};

#endif
