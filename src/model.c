#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tangent.h"

static void add_layer(Model *m, LayerKind kind, const char *name, int in, int out) {
    Layer *L = &m->layers[m->n_layers];
    L->kind = kind;
    snprintf(L->name, sizeof L->name, "%s", name);
    L->index = m->n_layers;
    L->in = in;
    L->out = out;
    L->param_offset = m->n_params;
    L->param_count = layer_ops(L)->param_count(in, out);
    m->n_params += L->param_count;
    m->max_width = FG_MAX(m->max_width, FG_MAX(in, out));
    m->n_layers++;
}

static void add_tensor(Model *m, int layer, const char *tensor, size_t offset, int rows, int cols) {
    char layer_name[sizeof m->layers[0].name];
    memcpy(layer_name, m->layers[layer].name, sizeof layer_name);
    TensorView *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s.%s", layer_name, tensor);
    t->layer = layer;
    t->offset = offset;
    t->rows = rows;
    t->cols = cols;
}

int model_build_mlp(Model *m, const char *widths, const char *activation, FgError *err) {
    memset(m, 0, sizeof *m);
    LayerKind act;
    if (strcmp(activation, "relu") == 0) act = LAYER_RELU;
    else if (strcmp(activation, "gelu") == 0) act = LAYER_GELU;
    else return fg_fail(err, FG_ERR_INPUT, "activation: '%s' is not one of relu|gelu", activation);

    int w[MODEL_MAX_LAYERS / 2 + 1], n = 0;
    const char *s = widths;
    while (*s) {
        char *end = (char *)s;
        long v = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : 0;  // digits only: no sign, space
        if (v <= 0 || v > (1 << 24) || (*end && *end != '-') || (*end == '-' && !end[1]))
            return fg_fail(err, FG_ERR_INPUT,
                           "model: '%s' is not a list of positive widths like 784-1024-10", widths);
        if (n == MODEL_MAX_LAYERS / 2 + 1)
            return fg_fail(err, FG_ERR_INPUT, "model: more than %d widths in '%s'",
                           MODEL_MAX_LAYERS / 2 + 1, widths);
        w[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    if (n < 2) return fg_fail(err, FG_ERR_INPUT, "model: '%s' needs at least two widths", widths);

    for (int i = 0; i + 1 < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        int l = m->n_layers;
        add_layer(m, LAYER_LINEAR, name, w[i], w[i + 1]);
        const Layer *L = &m->layers[l];
        add_tensor(m, l, "weight", L->param_offset, w[i + 1], w[i]);
        add_tensor(m, l, "bias", L->param_offset + (size_t)w[i] * w[i + 1], w[i + 1], 1);
        if (i + 2 < n) {
            snprintf(name, sizeof name, "%s%d", activation, i + 1);
            add_layer(m, act, name, w[i + 1], w[i + 1]);
        }
    }
    m->in_features = w[0];
    m->classes = w[n - 1];
    return FG_OK;
}

void model_init_range(const Model *m, int first, int last, float *params, uint32_t seed) {
    size_t base = model_range_offset(m, first);
    for (int t = 0; t < m->n_tensors; t++) {
        const TensorView *tv = &m->tensors[t];
        if (tv->layer < first || tv->layer >= last) continue;
        float *p = params + (tv->offset - base);
        size_t n = (size_t)tv->rows * tv->cols;
        memset(p, 0, n * sizeof(float));
        if (tv->cols == 1) continue;  // biases start at zero
        TangentKey key = {.seed = seed, .stream = STREAM_INIT, .layer = (uint32_t)tv->layer};
        tangent_axpy(key, 0, n, sqrtf(2.0f / (float)tv->cols), p);
    }
}

void model_init_params(const Model *m, float *params, uint32_t seed) {
    model_init_range(m, 0, m->n_layers, params, seed);
}

size_t model_range_offset(const Model *m, int first) {
    return first < m->n_layers ? m->layers[first].param_offset : m->n_params;
}

size_t model_range_count(const Model *m, int first, int last) {
    return model_range_offset(m, last) - model_range_offset(m, first);
}

int model_visit_layers(const Model *m, int first, int last, float *const *buffers, int n_buffers,
                       LayerVisitor visit, void *arg, FgError *err) {
    size_t base = model_range_offset(m, first);
    float *bufs[8];
    if (n_buffers > 8) return fg_fail(err, FG_ERR_INTERNAL, "model_visit_layers: %d buffers", n_buffers);
    int rc = FG_OK;
    for (int l = first; l < last && !rc; l++) {
        const Layer *L = &m->layers[l];
        if (!L->param_count) continue;
        for (int b = 0; b < n_buffers; b++) bufs[b] = buffers[b] + (L->param_offset - base);
        rc = visit(arg, L, bufs, err);
    }
    return rc;
}
