// What a checkpoint holds, and the interface through which a storage backend (hdf5io/) saves
// and loads it. The core names the tensors; the backend decides the file format.
//
// A stage contributes its own layers; tensors are addressed by name ("<buffer>/<layer>/<tensor>",
// e.g. params/fc1/weight, optimizer/m/fc1/weight), so a checkpoint written by M stages loads on
// any other number of stages.
#ifndef FGPIPE_CHECKPOINT_H
#define FGPIPE_CHECKPOINT_H

#include <stdint.h>

#include "common.h"
#include "model.h"

enum { CHECKPOINT_MAX_BUFFERS = 4, CHECKPOINT_FORMAT_VERSION = 1 };

typedef struct {
    const char *name;  // "params", "optimizer/m", ...
    float *data;       // the stage's slice, in the model's flat layout from param_base
} CheckpointBuffer;

typedef struct {
    const Model *model;
    int first, last;           // this stage's layers
    size_t param_base;         // model_range_offset(model, first)
    int n_buffers;
    CheckpointBuffer buffers[CHECKPOINT_MAX_BUFFERS];
    long step;                 // the next step to run
    uint32_t seed;
    const char *config_text;   // the resolved config (save only)
    int stages;                // the writer's layout (save only)
    const int *layout;         // [stages + 1]
} CheckpointState;

typedef struct CheckpointIO CheckpointIO;
struct CheckpointIO {
    void *ctx;
    // Collective over the pipeline's stages: every stage writes its layers. Atomic: the file at
    // path is replaced only once the new one is complete.
    int (*save)(CheckpointIO *io, const CheckpointState *st, const char *path, FgError *err);
    // Every stage reads its layers' tensors by name; *step and *seed come back in st. A file that
    // does not match (missing tensor, wrong shape, other format version, not a checkpoint) is
    // refused with FG_ERR_INPUT and a message naming the difference.
    int (*load)(CheckpointIO *io, CheckpointState *st, const char *path, FgError *err);
};

#endif
