// Activity perturbation (perturbation.h): op F adds a tangent u_{b,k} to every parameter
// layer's output tangent, one row per sample (no parameter tangents), and keeps the layer's
// input; op U forms G = sum_k diag(coeff) u_k and the weight half of the backward from it.
#include "perturbation.h"

void perturb_activity_jvp(Stage *st, int l, const float *p, const uint16_t *p16, const ParamTangents *t,
                          const float *x, const float *xdot, float *y, float *ydot, int rows) {
    const Layer *L = &st->model->layers[l];
    const Backend *be = st->be;
    int offset, width, T = layer_tokens(L);
    const Layer Lw = layer_with_weights16(L, p16);
    be->jvp(be, &Lw, p, NULL, x, xdot, y, ydot, rows, st->tangents);
    TangentKey key = t->key;
    key.layer = (uint32_t)l;
    key.stream = STREAM_ACTIVITY;
    layer_branch(L, &offset, &width);  // one tangent row per token, on the branch's columns
    be->tangent_add_rows(be, key, st->tangents, rows * T, width, NULL, ydot + offset,
                         (size_t)rows * L->out, (size_t)layer_out_token(L));
}

// F of a fused head: a tangent row of vocab values per token, made block by block there.
HeadTangents perturb_activity_head_tangents(Stage *st, int l, const ParamTangents *t,
                                            const float *x, int rows, TangentKey *key) {
    (void)st, (void)x, (void)rows;
    *key = t->key;
    key->layer = (uint32_t)l;
    key->stream = STREAM_ACTIVITY;
    return (HeadTangents){.activity = key};
}

// The layer's input, in its type.
static size_t activity_saved_floats(const Stage *st, int l, size_t rows) {
    return stage_act_floats(st, l, rows * st->model->layers[l].in);
}

// U: this replica's micro-batches, from their saved inputs (the replicas sum their estimates).
static void activity_estimate(const Stage *st, int l, const PerturbEstimate *e, float *grad_l) {
    size_t d_per_microbatch = (size_t)st->tangents * e->rows;
    size_t n = (size_t)e->replica_microbatches * e->rows * st->model->layers[l].in;
    const float *x = stage_act_load(st, l, e->saved, e->widened, n);
    stage_layer_activity_estimate(st, l, activity_key(e->seed, e->step, e->first_microbatch, l),
                                  e->replica_microbatches, e->rows,
                                  e->coeff + e->first_microbatch * d_per_microbatch, x, e->work, grad_l);
}

const PerturbationOps perturb_activity = {
    .name = "activity", .d_per_sample = 1, .saved_floats = activity_saved_floats,
    .jvp = perturb_activity_jvp, .estimate = activity_estimate,
    .head_tangents = perturb_activity_head_tangents};

void stage_layer_activity_estimate(const Stage *st, int l, TangentKey key, int n_mb, int rows,
                                   const float *coeff, const float *x, float *work, float *grad) {
    const Backend *be = st->be;
    const Layer *L = &st->model->layers[l];
    int K = st->tangents, T = layer_tokens(L), offset, width;
    if (st->plan[l].scores) {  // the fused head: G block by block
        key.layer = (uint32_t)l;
        key.stream = STREAM_ACTIVITY;
        be->head_activity_grad(be, L, key, K, n_mb, rows, coeff, x, grad);
        return;
    }
    layer_branch(L, &offset, &width);
    size_t block = (size_t)rows * L->out;
    be->zero(be, work, (size_t)n_mb * block * sizeof(float));
    key.layer = (uint32_t)l;
    key.stream = STREAM_ACTIVITY;
    uint32_t mb0 = key.microbatch;
    // A sample's coefficient on each of its T token rows.
    float *token_coeff = T > 1 ? fg_alloc_floats((size_t)K * rows * T) : NULL;
    for (int b = 0; b < n_mb; b++) {
        const float *c = coeff + (size_t)b * K * rows;
        for (size_t i = 0; token_coeff && i < (size_t)K * rows * T; i++) token_coeff[i] = c[i / T];
        key.microbatch = mb0 + (uint32_t)b;
        be->tangent_add_rows(be, key, K, rows * T, width, token_coeff ? token_coeff : c,
                             work + b * block + offset, 0, (size_t)layer_out_token(L));
    }
    fg_free(token_coeff);
    // The weight half of the layer's backward: dW += G^T x, db += column sums of G.
    be->backward(be, L, NULL, x, work, NULL, grad, n_mb * rows);
}
