// Full weight perturbation (perturbation.h): layer l's parameter tangents v_k ~ N(0, I) are
// made whole in op F, one layer at a time, and op U regenerates them to add sum coeff v.
#include "perturbation.h"

// F: the K tangents into the stage's pdot buffer (the guide replaces tangent 0), each dotted
// with the reference while it is in memory.
static void weight_tangents(Stage *st, int l, const ParamTangents *t) {
    const Layer *L = &st->model->layers[l];
    const Backend *be = st->be;
    size_t n = L->param_count;
    TangentKey key = t->key;
    key.layer = (uint32_t)l;
    for (int k = 0; k < st->tangents; k++) {
        key.k = (uint32_t)k;
        float *dst = st->pdot + k * n;
        double ref_dot;
        if (k == 0 && t->guide) {
            be->copy(be, dst, t->guide, n * sizeof(float));
            ref_dot = t->ref ? be->dot(be, t->ref, dst, n) : 0.0;
        } else {
            ref_dot = be->tangent_fill(be, key, n, dst, t->ref);
        }
        if (t->ref) t->ref_dots[k] += ref_dot;
    }
}

// F: the layer's JVP with them.
static void weight_jvp(Stage *st, int l, const float *p, const uint16_t *p16, const ParamTangents *t,
                       const float *x, const float *xdot, float *y, float *ydot, int rows) {
    weight_tangents(st, l, t);
    Layer L = layer_with_weights16(&st->model->layers[l], p16);
    st->be->jvp(st->be, &L, p, st->pdot, x, xdot, y, ydot, rows, st->tangents);
}

// U: every replica's micro-batches, regenerated from the seed (no inputs saved); of a row block
// of the layer (e->count < its parameters).
static void weight_estimate(const Stage *st, int l, const PerturbEstimate *e, float *grad_l) {
    stage_layer_add_tangents_part(st, l, tangent_key(e->seed, e->step, 0, l), e->all_microbatches,
                                  e->coeff, e->first, e->count, grad_l);
}

// F of a fused head: its table's tangents whole, like any layer's.
static HeadTangents weight_head_tangents(Stage *st, int l, const ParamTangents *t, const float *x,
                                         int rows, TangentKey *key) {
    (void)x, (void)rows, (void)key;
    weight_tangents(st, l, t);
    return (HeadTangents){.Wdot = st->pdot};
}

const PerturbationOps perturb_weight = {
    .name = "weight", .jvp = weight_jvp, .estimate = weight_estimate,
    .head_tangents = weight_head_tangents};

void stage_layer_add_tangents(const Stage *st, int l, TangentKey key, int n_mb,
                              const float *coeff, float *grad_l) {
    const Layer *L = &st->model->layers[l];
    key.layer = (uint32_t)l;
    if (stage_layer_lowrank(st, L)) stage_lowrank_add_tangents(st, L, key, n_mb, coeff, grad_l);
    else st->be->tangent_axpy(st->be, key, n_mb, st->tangents, coeff, L->param_count, grad_l);
}

void stage_layer_add_tangents_part(const Stage *st, int l, TangentKey key, int n_mb,
                                   const float *coeff, size_t first, size_t count, float *grad_l) {
    if (first == 0 && count == st->model->layers[l].param_count) {
        stage_layer_add_tangents(st, l, key, n_mb, coeff, grad_l);
        return;
    }
    key.layer = (uint32_t)l;  // the CPU backend's order: micro-batch, then tangent
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < st->tangents; k++) {
            TangentKey kk = key;
            kk.microbatch += (uint32_t)b, kk.k = (uint32_t)k;
            tangent_axpy(kk, first, count, coeff[b * st->tangents + k], grad_l);
        }
}

void stage_layer_tangent_dots(const Stage *st, int l, TangentKey key, int n_mb, const float *x_l,
                              double *dots) {
    const Layer *L = &st->model->layers[l];
    key.layer = (uint32_t)l;
    if (stage_layer_lowrank(st, L)) stage_lowrank_tangent_dots(st, L, key, n_mb, x_l, dots);
    else st->be->tangent_dot(st->be, key, n_mb, st->tangents, L->param_count, x_l, dots);
}
