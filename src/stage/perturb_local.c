// Local losses on a stage (perturbation.h, stage.h, local_loss.h): the fixed heads, op F's
// directional derivatives at each head, and the update's estimate from them. The linear layer
// before a head takes activity tangents; its estimate is known in F, where a resident stage
// folds it into the layer's update (no layer input saved past the lane).
#include <string.h>

#include "local_loss.h"
#include "perturbation.h"

int stage_local_head(const Stage *st, int l) {
    if (!st->local_groups || l <= st->first || l >= st->last) return 0;
    const Layer *L = &st->model->layers[l];
    return (L->kind == LAYER_RELU || L->kind == LAYER_GELU) &&
           st->model->layers[l - 1].kind == LAYER_LINEAR && layer_tokens(L) == 1;
}

int stage_local_folds(const Stage *st, int l) {
    return !st->local_keeps && stage_local_head(st, l + 1);
}

int stage_set_local_groups(Stage *st, int groups, uint32_t seed, FgError *err) {
    if (!groups || !st->tangents) return FG_OK;
    const Model *m = st->model;
    if (m->classes > LOCAL_MAX_CLASSES)
        return fg_fail(err, FG_ERR_INPUT, "local_groups: %d classes, a local head takes at most %d",
                       m->classes, LOCAL_MAX_CLASSES);
    for (int l = 1; l < m->n_layers; l++)  // every stage checks the whole model: one message
        if (m->layers[l - 1].kind == LAYER_LINEAR && m->layers[l].kind != LAYER_LINEAR &&
            m->layers[l].out % groups)
            return fg_fail(err, FG_ERR_INPUT, "local_groups = %d does not divide the %d outputs "
                           "of layer %s", groups, m->layers[l].out, m->layers[l - 1].name);
    st->local_groups = groups;
    st->local_head = fg_alloc_bytes((size_t)m->n_layers * sizeof *st->local_head);
    for (int l = st->first; l < st->last; l++) {
        if (!stage_local_head(st, l)) continue;
        int width = m->layers[l].out;
        st->local_head[l] = fg_alloc_floats((size_t)width * m->classes);
        local_heads_fill(seed, l, width, groups, m->classes, st->local_head[l]);
    }
    st->local_work = fg_alloc_floats((size_t)st->tangents * st->max_rows * groups + m->max_width);
    return FG_OK;
}

void stage_free_local(Stage *st) {
    for (int l = 0; st->local_head && l < st->model->n_layers; l++) fg_free(st->local_head[l]);
    fg_free(st->local_head);
    fg_free(st->local_work);
}

void stage_local_output_grad(const Stage *st, int l, const float *h, const float *hdot,
                             const float *zdot, const Label *labels, int rows, float scale,
                             float *est) {
    const Model *m = st->model;
    int K = st->tangents, G = st->local_groups, width = m->layers[l].out, S = width / G;
    float *d = st->local_work, *work = d + (size_t)K * rows * G;
    local_loss_jvp(st->local_head[l], h, hdot, labels, rows, width, G, m->classes, K, work, d);
    // ReLU: hdot is u with the dead units zeroed, whose gradient is known to be 0.
    const float *u = m->layers[l].kind == LAYER_RELU ? hdot : zdot;
    memset(est, 0, (size_t)rows * width * sizeof(float));
    for (int k = 0; k < K; k++)
        for (int r = 0; r < rows; r++)
            for (int g = 0; g < G; g++) {
                size_t at = ((size_t)k * rows + r) * width + (size_t)g * S;
                float c = scale * d[((size_t)k * rows + r) * G + g];
                float *e = est + (size_t)r * width + (size_t)g * S;
                for (int j = 0; j < S; j++) e[j] += c * u[at + j];
            }
}

void stage_local_weight_grad(const Stage *st, int l, int rows, const float *x, const float *est,
                             float *grad) {
    const Layer *L = &st->model->layers[l];
    st->be->backward(st->be, L, NULL, x, est, NULL, grad, rows);
}

void stage_local_fold(const Stage *st, int l, int mb, int rows, const float *x, const float *est,
                      float *grad) {
    if (mb == 0) st->be->zero(st->be, grad, st->model->layers[l].param_count * sizeof(float));
    stage_local_weight_grad(st, l, rows, x, est, grad);
}

// Kept on a streamed stage: the layer's inputs in their type (as activity keeps them), then the
// estimate formed at the head [rows, out] in FP32 (a sum of products, not a value between
// layers). A resident stage keeps nothing past its lane (stage_local_fold in F).
static size_t local_saved_floats(const Stage *st, int l, size_t rows) {
    if (!st->local_keeps) return 0;
    return stage_local_estimate_offset(st, l, (int)rows) + rows * st->model->layers[l].out;
}

size_t stage_local_estimate_offset(const Stage *st, int l, int rows) {
    return stage_act_floats(st, l, (size_t)rows * st->model->layers[l].in);
}

// U: fg's estimate, weighed. A streamed stage folds the micro-batches F saved now.
static void local_estimate(const Stage *st, int l, const PerturbEstimate *e, float *grad_l) {
    const Layer *L = &st->model->layers[l];
    if (st->local_keeps) {
        int rows = e->replica_microbatches * e->rows;
        const float *est = e->saved + stage_local_estimate_offset(st, l, rows);
        const float *x = stage_act_load(st, l, e->saved, e->widened, (size_t)rows * L->in);
        for (int b = 0; b < e->replica_microbatches; b++)
            stage_local_fold(st, l, b, e->rows, x + (size_t)b * e->rows * L->in,
                             est + (size_t)b * e->rows * L->out, grad_l);
    }
    if (e->fg_weight != 1.0f) st->be->scale(st->be, grad_l, e->fg_weight, grad_l, L->param_count);
}

const PerturbationOps perturb_local = {
    .name = "local", .d_per_sample = 1, .saved_floats = local_saved_floats,
    .jvp = perturb_activity_jvp, .estimate = local_estimate, .sets_estimate = 1,
    .head_tangents = perturb_activity_head_tangents};
