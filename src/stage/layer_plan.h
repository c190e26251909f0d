// What a stage does with each of its layers, decided once from the model's flags when the stage
// is made: the passes (src/stage, src/engine) read the plan instead of testing the flags.
#ifndef FGPIPE_LAYER_PLAN_H
#define FGPIPE_LAYER_PLAN_H

#include "model.h"

typedef struct {
    int trains;  // the layer's parameters take tangents, gradients and steps: it has some, and
                 // they are not frozen (config freeze, a LoRA base)
    int scores;  // the head fused with the loss (LAYER_HEAD_LOSS): op F passes it the labels
                 // (HeadScore, stage.h), its output is a record per row, and no tangent leaves it
} LayerPlan;

// The plans of m's layers, [m->n_layers] (fg_free).
LayerPlan *layer_plan_build(const Model *m);

#endif
