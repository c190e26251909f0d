// Local losses on a stage (stage.h, local_loss.h): the fixed heads, op F's directional
// derivatives at each head, and the update's estimate from them.
#include <string.h>

#include "local_loss.h"
#include "stage.h"

int stage_local_head(const Stage *st, int l) {
    if (!st->local_groups || l <= st->first || l >= st->last) return 0;
    const Layer *L = &st->model->layers[l];
    return (L->kind == LAYER_RELU || L->kind == LAYER_GELU) &&
           st->model->layers[l - 1].kind == LAYER_LINEAR && layer_tokens(L) == 1;
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
    st->local_work = fg_alloc_floats((size_t)st->tangents * st->max_rows * m->max_width);
    return FG_OK;
}

void stage_free_local(Stage *st) {
    for (int l = 0; st->local_head && l < st->model->n_layers; l++) fg_free(st->local_head[l]);
    fg_free(st->local_head);
    fg_free(st->local_work);
}

double stage_local_derivatives(const Stage *st, int l, const float *h, const float *hdot,
                               const uint8_t *labels, int rows, float *d) {
    const Model *m = st->model;
    return local_loss_jvp(st->local_head[l], h, hdot, labels, rows, m->layers[l].out,
                          st->local_groups, m->classes, st->tangents, st->local_work, d);
}

void stage_layer_local_estimate(const Stage *st, int l, TangentKey key, int n_mb, int rows,
                                const float *coeff, const float *x, float *work, float *grad) {
    const Backend *be = st->be;
    const Layer *L = &st->model->layers[l];
    int K = st->tangents, G = st->local_groups, S = L->out / G;
    size_t block = (size_t)rows * L->out;
    key.layer = (uint32_t)l;
    key.stream = STREAM_ACTIVITY;
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < n_mb; b++) {
        float *w = work + b * block;
        memset(w, 0, block * sizeof(float));
        key.microbatch = mb0 + (uint32_t)b;
        for (int k = 0; k < K; k++) {  // G = sum_k c_k u_k, c_k one value per row and group
            key.k = (uint32_t)k;
            tangent_fill(key, 0, block, st->local_work);
            const float *c = coeff + ((size_t)b * K + k) * rows * G;
            for (int r = 0; r < rows; r++) {
                const float *u = st->local_work + (size_t)r * L->out;
                float *wr = w + (size_t)r * L->out;
                for (int j = 0; j < L->out; j++) wr[j] += c[(size_t)r * G + j / S] * u[j];
            }
        }
    }
    // The weight half of the layer's backward: dW += G^T x, db += column sums of G.
    be->backward(be, L, NULL, x, work, NULL, grad, n_mb * rows);
}
