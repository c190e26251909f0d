// Which perturbation a layer takes, and the layout of what op F keeps for op U.
#include "perturbation.h"

const PerturbationOps *stage_perturbation(const Stage *st, int l) {
    if (st->perturb == PERTURB_ACTIVITY)  // a linear layer before a local head learns from it
        return stage_local_head(st, l + 1) ? &perturb_local : &perturb_activity;
    return stage_layer_lowrank(st, &st->model->layers[l]) ? &perturb_lowrank : &perturb_weight;
}

const PerturbationOps *perturbation_of_kind(Perturbation kind) {
    return kind == PERTURB_ACTIVITY ? &perturb_activity : &perturb_weight;
}

size_t stage_saved_offset(const Stage *st, int layer, int rows) {
    size_t off = 0;
    for (int l = st->first; l < layer; l++) {
        if (!st->model->layers[l].param_count) continue;
        const PerturbationOps *ops = stage_perturbation(st, l);
        if (ops->saved_floats) off += ops->saved_floats(st, l, (size_t)rows);
    }
    return off;
}

size_t stage_saved_floats(const Stage *st, int rows) {
    return stage_saved_offset(st, st->last, rows);
}

size_t stage_saved_widened_floats(const Stage *st, int rows) {
    size_t most = 0;
    for (int l = st->first; l < st->last; l++) {
        if (!st->model->layers[l].param_count || stage_act_type(st, l) == FG_F32) continue;
        const PerturbationOps *ops = stage_perturbation(st, l);
        if (ops->saved_floats && ops->saved_floats(st, l, 1))
            most = FG_MAX(most, (size_t)rows * st->model->layers[l].in);
    }
    return most;
}
