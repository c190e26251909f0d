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
    int lowrank;     // its weight is [n, k] per token (a linear layer's, the fused head's table):
                     // its weight tangents may be low rank (tangent_rank, perturb_lowrank.c)
    int loss_width;  // the model's last layer: floats of the loss's adjoint per label position,
                     // the fused head's record (HEAD_RECORD) or a row of logits; 0 elsewhere
} LayerPlan;

// The plan of m's layer l.
LayerPlan layer_plan_of(const Model *m, int l);
// The plans of m's layers, [m->n_layers] (fg_free).
LayerPlan *layer_plan_build(const Model *m);

#endif
