// The per-layer plan of a stage (layer_plan.h).
#include "layer_plan.h"

LayerPlan *layer_plan_build(const Model *m) {
    LayerPlan *plan = fg_alloc_bytes((size_t)m->n_layers * sizeof(LayerPlan));
    for (int l = 0; l < m->n_layers; l++) {
        const Layer *L = &m->layers[l];
        plan[l] = (LayerPlan){.trains = L->param_count && !L->frozen, .scores = L->kind == LAYER_HEAD_LOSS};
    }
    return plan;
}
