#include "stage.h"

#include <string.h>

int stage_init(Stage *st, const Model *m, int first, int last, int max_rows, int tangents,
               FgError *err) {
    memset(st, 0, sizeof *st);
    if (first < 0 || last > m->n_layers || first >= last)
        return fg_fail(err, FG_ERR_INPUT, "stage: layers [%d, %d) are not a range of the %d layers",
                       first, last, m->n_layers);
    st->model = m;
    st->first = first;
    st->last = last;
    st->param_base = model_range_offset(m, first);
    st->param_count = model_range_count(m, first, last);
    st->max_rows = max_rows;
    st->tangents = tangents;
    size_t plane = (size_t)max_rows * m->max_width;
    size_t largest = 0;
    for (int l = first; l < last; l++) largest = FG_MAX(largest, m->layers[l].param_count);
    for (int i = 0; i < 2; i++) {
        st->act[i] = fg_alloc_floats(plane);
        st->adj[i] = fg_alloc_floats(plane);
        if (tangents) st->tan[i] = fg_alloc_floats((size_t)tangents * plane);
    }
    if (tangents) st->pdot = fg_alloc_floats((size_t)tangents * largest);
    return FG_OK;
}

void stage_free(Stage *st) {
    for (int i = 0; i < 2; i++) {
        fg_free(st->act[i]);
        fg_free(st->adj[i]);
        fg_free(st->tan[i]);
    }
    fg_free(st->pdot);
    memset(st, 0, sizeof *st);
}

// Stash layout: layer l's input at stash_at(l), the stage output at stash_at(last).
static size_t stash_offset(const Stage *st, int l, int rows) {
    size_t off = 0;
    for (int i = st->first; i < l; i++) off += (size_t)rows * st->model->layers[i].in;
    return off;
}

size_t stage_stash_floats(const Stage *st, int rows) {
    return stash_offset(st, st->last, rows) + (size_t)rows * st->model->layers[st->last - 1].out;
}

static const float *layer_params(const Stage *st, const float *params, const Layer *L) {
    return params + (L->param_offset - st->param_base);
}

void stage_forward(Stage *st, const float *params, const TangentKey *key, const float *x,
                   const float *xdot, int rows, float *stash, const float **y,
                   const float **ydot) {
    const Model *m = st->model;
    int K = st->tangents;
    if (stash) {
        memcpy(stash, x, (size_t)rows * m->layers[st->first].in * sizeof(float));
        x = stash;
    }
    for (int l = st->first; l < st->last; l++) {
        const Layer *L = &m->layers[l];
        const LayerOps *ops = layer_ops(L);
        const float *p = layer_params(st, params, L);
        int slot = (l - st->first) & 1;
        // Outputs go straight into the stash when there is one: they are the next input.
        float *out = stash ? stash + stash_offset(st, l + 1, rows) : st->act[slot];
        if (key) {
            const float *pdot = NULL;
            if (L->param_count) {
                TangentKey lk = *key;
                lk.layer = (uint32_t)l;
                for (int k = 0; k < K; k++) {
                    lk.k = (uint32_t)k;
                    float *dst = st->pdot + k * L->param_count;
                    if (k == 0 && st->guide) memcpy(dst, layer_params(st, st->guide, L), L->param_count * sizeof(float));
                    else tangent_fill(lk, 0, L->param_count, dst);
                }
                pdot = st->pdot;
            }
            ops->jvp(L, p, pdot, x, xdot, out, st->tan[slot], rows, K);
            xdot = st->tan[slot];
        } else {
            ops->forward(L, p, x, out, rows);
        }
        x = out;
    }
    *y = x;
    if (ydot) *ydot = key ? xdot : NULL;
}

void stage_backward(Stage *st, const float *params, const float *stash, const float *dy,
                    float *dx, float *grad, int rows) {
    const Model *m = st->model;
    for (int l = st->last - 1; l >= st->first; l--) {
        const Layer *L = &m->layers[l];
        float *dx_l = l == st->first ? dx : st->adj[(l - st->first) & 1];
        layer_ops(L)->backward(L, layer_params(st, params, L), stash + stash_offset(st, l, rows),
                               dy, dx_l, grad + (L->param_offset - st->param_base), rows);
        dy = dx_l;
    }
}

// Visits every (layer with parameters, micro-batch, tangent) of the stage in one fixed order
// and either adds coeff * v into grad or accumulates v . x into dots (per layer: one row of
// n_mb*K per layer of the stage).
static void tangent_pass(const Stage *st, TangentKey key, int n_mb, const float *coeff,
                         float *grad, const float *x, double *dots, int per_layer) {
    int K = st->tangents;
    uint32_t mb0 = key.microbatch;
    for (int l = st->first; l < st->last; l++) {
        const Layer *L = &st->model->layers[l];
        size_t off = L->param_offset - st->param_base;
        if (!L->param_count) continue;
        key.layer = (uint32_t)l;
        for (int b = 0; b < n_mb; b++)
            for (int k = 0; k < K; k++) {
                key.microbatch = mb0 + (uint32_t)b;
                key.k = (uint32_t)k;
                if (grad) tangent_axpy(key, 0, L->param_count, coeff[b * K + k], grad + off);
                else dots[(per_layer ? (size_t)(l - st->first) * n_mb * K : 0) + b * K + k] +=
                    tangent_dot(key, 0, L->param_count, x + off);
            }
    }
}

void stage_add_tangents(const Stage *st, TangentKey key, int n_mb, const float *coeff,
                        float *grad) {
    tangent_pass(st, key, n_mb, coeff, grad, NULL, NULL, 0);
}

void stage_tangent_dots(const Stage *st, TangentKey key, int n_mb, const float *x, double *dots) {
    for (int i = 0; i < n_mb * st->tangents; i++) dots[i] = 0.0;
    tangent_pass(st, key, n_mb, NULL, NULL, x, dots, 0);
}

void stage_tangent_dots_by_layer(const Stage *st, TangentKey key, int n_mb, const float *x,
                                 double *dots) {
    size_t n = (size_t)(st->last - st->first) * n_mb * st->tangents;
    for (size_t i = 0; i < n; i++) dots[i] = 0.0;
    tangent_pass(st, key, n_mb, NULL, NULL, x, dots, 1);
}
