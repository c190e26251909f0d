// A GPT checkpoint rebuilt on one CPU rank for inference (fgpipe generate, fgpipe eval): the
// model of its stored config, its parameters in one flat buffer, and a stage over all layers.
#ifndef FGPIPE_CHECKPOINT_MODEL_H
#define FGPIPE_CHECKPOINT_MODEL_H

#include "config.h"
#include "model.h"
#include "stage.h"
#include "storage.h"

typedef struct {
    Config cfg;     // as stored in the checkpoint
    Model model;
    float *params;  // model.n_params
    Stage stage;    // every layer, for up to max_rows samples per forward
} CheckpointModel;

// Errors name the checkpoint and the cause (not a GPT, unreadable, a tensor that does not match).
int checkpoint_model_load(CheckpointModel *cm, Storage *io, const char *path, int max_rows,
                          const char *command, FgError *err);
void checkpoint_model_free(CheckpointModel *cm);  // also on a zeroed one

// The logits of `rows` samples x [model.tokens rows of model.logit_stride] (stage memory).
const float *checkpoint_model_forward(CheckpointModel *cm, const float *x, int rows);

#endif
