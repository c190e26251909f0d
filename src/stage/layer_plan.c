// The per-layer plan of a stage (layer_plan.h).
#include "layer_plan.h"

#include "head_loss.h"

LayerPlan layer_plan_of(const Model *m, int l) {
    const Layer *L = &m->layers[l];
    const int scores = L->kind == LAYER_HEAD_LOSS, last = l == m->n_layers - 1;
    return (LayerPlan){.trains = L->param_count && !L->frozen, .scores = scores,
                       .lowrank = L->kind == LAYER_LINEAR || scores,
                       .loss_width = !last ? 0 : scores ? HEAD_RECORD : m->logit_stride};
}

LayerPlan *layer_plan_build(const Model *m) {
    LayerPlan *plan = fg_alloc_bytes((size_t)m->n_layers * sizeof(LayerPlan));
    for (int l = 0; l < m->n_layers; l++) plan[l] = layer_plan_of(m, l);
    return plan;
}
