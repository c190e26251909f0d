#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "head_loss.h"
#include "model_build.h"
#include "philox.h"
#include "tangent.h"

// Appends layer L (kind, name, widths and shape fields set) and gives it its parameters.
Layer *add_layer(Model *m, Layer L) {
    L.index = m->n_layers;
    L.param_offset = m->n_params;
    L.param_count = layer_ops(&L)->param_count(&L);
    m->n_params += L.param_count;
    m->max_width = FG_MAX(m->max_width, FG_MAX(L.in, L.out));
    m->layers[m->n_layers] = L;
    return &m->layers[m->n_layers++];
}

// A view of `rows x cols` floats of layer L's parameters from `offset` on (relative to the
// layer), named "<L's name>.<tensor>" or, when tensor has a dot, `tensor` itself.
TensorView *add_tensor(Model *m, const Layer *L, const char *tensor, size_t offset, int rows,
                       int cols, float init_std, float init_value) {
    TensorView *t = &m->tensors[m->n_tensors];
    char layer_name[sizeof L->name];  // a copy: L lives in m too (no overlapping snprintf)
    memcpy(layer_name, L->name, sizeof layer_name);
    if (strchr(tensor, '.')) snprintf(t->name, sizeof t->name, "%s", tensor);
    else snprintf(t->name, sizeof t->name, "%s.%s", layer_name, tensor);
    t->layer = L->index;
    t->offset = L->param_offset + offset;
    t->rows = rows;
    t->cols = cols;
    t->init_std = init_std;
    t->init_value = init_value;
    t->init_key = (uint32_t)m->n_tensors;
    m->n_tensors++;
    return t;
}

Layer layer_of(LayerKind kind, const char *name, int in, int out) {
    Layer L = {.kind = kind, .in = in, .out = out, .tokens = 1};
    snprintf(L.name, sizeof L.name, "%s", name);
    return L;
}

int model_build_mlp(Model *m, const char *widths, const char *activation, FgError *err) {
    memset(m, 0, sizeof *m);
    m->tied_first = m->tied_last = -1;
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
        char name[32];
        snprintf(name, sizeof name, "fc%d", i + 1);
        Layer fc = layer_of(LAYER_LINEAR, name, w[i], w[i + 1]);
        const Layer *L = add_layer(m, fc);
        // Kaiming-normal weights; the draw is keyed by the layer, as it always was.
        add_tensor(m, L, "weight", 0, w[i + 1], w[i], sqrtf(2.0f / (float)w[i]), 0)->init_key =
            (uint32_t)L->index;
        add_tensor(m, L, "bias", (size_t)w[i] * w[i + 1], w[i + 1], 1, 0, 0);
        if (i + 2 < n) {
            snprintf(name, sizeof name, "%s%d", activation, i + 1);
            add_layer(m, layer_of(act, name, w[i + 1], w[i + 1]));
        }
    }
    m->in_features = w[0];
    m->classes = m->logit_stride = w[n - 1];
    m->tokens = 1;
    return FG_OK;
}

// A layer of block `block` over tokens [x, branch]: in and out are per-token widths.
static Layer gpt_layer(LayerKind kind, int block, const char *suffix, GptShape g, int in, int out) {
    char name[32];
    snprintf(name, sizeof name, "h.%d.%s", block, suffix);
    Layer L = layer_of(kind, name, g.ctx * in, g.ctx * out);
    L.tokens = g.ctx;
    L.carry = g.n_embd;
    L.heads = g.n_head;
    return L;
}

// A linear layer of a block: W [n, k] ~ N(0, 0.02), bias [n] = 0.
static void add_gpt_linear(Model *m, int block, const char *suffix, GptShape g, int k, int n,
                           int residual) {
    const int C = g.n_embd;
    Layer L = gpt_layer(LAYER_LINEAR, block, suffix, g, C + k, residual ? C : C + n);
    L.residual = residual;
    const Layer *fc = add_layer(m, L);
    add_tensor(m, fc, "weight", 0, n, k, 0.02f, 0);
    add_tensor(m, fc, "bias", (size_t)n * k, n, 1, 0, 0);
}

static void add_layernorm(Model *m, Layer L, int C) {
    const Layer *ln = add_layer(m, L);
    add_tensor(m, ln, "weight", 0, C, 1, 0, 1);
    add_tensor(m, ln, "bias", C, C, 1, 0, 0);
}

// One pre-LayerNorm block as a chain of layers over [x, branch] tokens (layer.h):
// x += c_proj(attn(c_attn(ln_1(x)))), then x += mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))).
static void add_gpt_block(Model *m, int b, GptShape g) {
    const int C = g.n_embd;
    add_layernorm(m, gpt_layer(LAYER_LAYERNORM, b, "ln_1", g, C, 2 * C), C);
    add_gpt_linear(m, b, "attn.c_attn", g, C, 3 * C, 0);
    add_layer(m, gpt_layer(LAYER_ATTENTION, b, "attn", g, 4 * C, 2 * C));
    add_gpt_linear(m, b, "attn.c_proj", g, C, C, 1);
    add_layernorm(m, gpt_layer(LAYER_LAYERNORM, b, "ln_2", g, C, 2 * C), C);
    add_gpt_linear(m, b, "mlp.c_fc", g, C, 4 * C, 0);
    add_layer(m, gpt_layer(LAYER_GELU, b, "mlp.gelu", g, 5 * C, 5 * C));
    add_gpt_linear(m, b, "mlp.c_proj", g, 4 * C, C, 1);
}

int model_build_gpt(Model *m, GptShape g, FgError *err) {
    memset(m, 0, sizeof *m);
    if (g.n_layer < 1 || g.n_embd < 1 || g.n_head < 1 || g.ctx < 1 || g.vocab < 1 || g.pad_vocab < 1)
        return fg_fail(err, FG_ERR_INPUT, "model gpt: n_layer %d, n_embd %d, n_head %d, ctx %d, "
                       "vocab %d and pad_vocab %d must all be positive", g.n_layer, g.n_embd,
                       g.n_head, g.ctx, g.vocab, g.pad_vocab);
    if (g.n_embd % g.n_head)
        return fg_fail(err, FG_ERR_INPUT, "model gpt: n_embd %d is not a multiple of n_head %d",
                       g.n_embd, g.n_head);
    if (8 * g.n_layer + 3 > MODEL_MAX_LAYERS)
        return fg_fail(err, FG_ERR_INPUT, "model gpt: n_layer %d needs more than %d layers",
                       g.n_layer, MODEL_MAX_LAYERS);
    if ((long long)g.ctx * 5 * g.n_embd > (1 << 30))
        return fg_fail(err, FG_ERR_INPUT, "model gpt: ctx %d x 5 n_embd %d floats per sample is "
                       "too wide", g.ctx, g.n_embd);
    // The table's rows: the vocabulary padded (GPT-2: 50257 -> 50304, aligned GEMMs).
    const int C = g.n_embd, T = g.ctx, V = (g.vocab + g.pad_vocab - 1) / g.pad_vocab * g.pad_vocab;
    if ((long long)V * C > (1LL << 31) || (long long)T * V > (1 << 30))
        return fg_fail(err, FG_ERR_INPUT, "model gpt: a token table of %d x %d or ctx %d x %d "
                       "logits per sample is too large", V, C, T, V);
    Layer L = layer_of(LAYER_EMBEDDING, "embedding", T, T * C);
    L.tokens = T, L.vocab = V;
    const Layer *emb = add_layer(m, L);
    const TensorView *wte = add_tensor(m, emb, "wte.weight", 0, V, C, 0.02f, 0);
    add_tensor(m, emb, "wpe.weight", (size_t)V * C, T, C, 0.02f, 0);
    for (int b = 0; b < g.n_layer; b++) add_gpt_block(m, b, g);
    L = layer_of(LAYER_LAYERNORM, "ln_f", T * C, T * C);
    L.tokens = T;
    add_layernorm(m, L, C);
    const Layer *head = add_lm_head(m, T, C, V, g.vocab, g.fused_head, g.head_block);
    // The head's copy of wte starts equal to it (one init key) and stays so (docs/gpt.md).
    add_tensor(m, head, "weight", 0, V, C, 0.02f, 0)->init_key = wte->init_key;
    m->tied_first = emb->index;
    m->tied_last = head->index;
    return FG_OK;
}

Layer *add_lm_head(Model *m, int T, int C, int V, int classes, int fused_head, int head_block) {
    Layer L = fused_head ? layer_of(LAYER_HEAD_LOSS, "lm_head", T * C, T * HEAD_RECORD)
                         : layer_of(LAYER_LINEAR, "lm_head", T * C, T * V);
    L.tokens = T, L.no_bias = 1, L.vocab = V, L.classes = classes;
    if (fused_head) L.head_block = head_block > 0 ? head_block : HEAD_BLOCK_COLUMNS;
    m->in_features = T;
    m->classes = classes;
    m->logit_stride = V;
    m->tokens = T;
    m->fused_head = fused_head;
    return add_layer(m, L);
}

// p[i - first] ~ U(-bound, bound) for i in [first, first + n) from the init stream: Philox words
// keyed like a tangent, 24 bits each, word i / 4 for element i (any first: a row block).
static void init_uniform(TangentKey key, size_t first, size_t n, float bound, float *p) {
    for (size_t i = first / 4 * 4; i < first + n; i += 4) {
        Philox4 w = philox4x32_10((Philox4){{(uint32_t)(i / 4), key.layer, key.stream, 0x10A4u}},
                                  key.seed, (uint32_t)(i >> 34));
        for (size_t j = 0; j < 4 && i + j < first + n; j++) {
            if (i + j < first) continue;
            float u = (float)(w.v[j] >> 8) * (1.0f / 16777216.0f);  // [0, 1)
            p[i + j - first] = bound * (2.0f * u - 1.0f);
        }
    }
}

// The floats [from, from + n) of layer l's parameters that tensor tv holds, initialised into out
// (out[0]: the layer's float `from`).
static void init_tensor_part(const Model *m, const TensorView *tv, size_t from, size_t n, float *out,
                             uint32_t seed) {
    size_t at = tv->offset - m->layers[tv->layer].param_offset, size = (size_t)tv->rows * tv->cols;
    size_t lo = FG_MAX(at, from), hi = FG_MIN(at + size, from + n);
    if (lo >= hi) return;
    float *p = out + (lo - from);
    for (size_t i = 0; i < hi - lo; i++) p[i] = tv->init_value;
    TangentKey key = {.seed = seed, .stream = STREAM_INIT, .layer = tv->init_key};
    if (tv->init_uniform > 0) init_uniform(key, lo - at, hi - lo, tv->init_uniform, p);
    if (tv->init_std > 0) tangent_axpy(key, lo - at, hi - lo, tv->init_std, p);
}

void model_init_part(const Model *m, int l, size_t first, size_t n, float *out, uint32_t seed) {
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].layer == l) init_tensor_part(m, &m->tensors[t], first, n, out, seed);
}

void model_init_range(const Model *m, int first, int last, float *params, uint32_t seed) {
    size_t base = model_range_offset(m, first);
    for (int l = first; l < last; l++)
        model_init_part(m, l, 0, m->layers[l].param_count, params + (m->layers[l].param_offset - base), seed);
}

static int is_table(const Layer *L) { return L->kind == LAYER_EMBEDDING || L->kind == LAYER_HEAD_LOSS; }

void model_set_row_blocks(Model *m, int rows) {
    for (int l = 0; l < m->n_layers; l++) {
        Layer *L = &m->layers[l];
        L->block_rows = is_table(L) && rows > 0 && L->param_count > (size_t)rows * layer_row_floats(L) ? rows : 0;
    }
}

int model_table_rows(const Model *m, int first, int last) {
    int rows = 0;
    for (int l = first; l < last; l++) {
        const Layer *L = &m->layers[l];
        if (is_table(L) && L->param_count) rows = FG_MAX(rows, (int)(L->param_count / layer_row_floats(L)));
    }
    return rows;
}

size_t model_largest_block(const Model *m, int first, int last) {
    size_t largest = 0;
    for (int l = first; l < last; l++) {
        size_t at, n;
        layer_block(&m->layers[l], 0, &at, &n);
        largest = FG_MAX(largest, n);
    }
    return largest;
}

size_t model_largest_trained_block(const Model *m, int first, int last) {
    size_t largest = 1;
    for (int l = first; l < last; l++) {
        size_t at, n;
        layer_block(&m->layers[l], 0, &at, &n);
        if (!m->layers[l].frozen) largest = FG_MAX(largest, n);
    }
    return largest;
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
        rc = visit(arg, L, 0, L->param_count, bufs, err);
    }
    return rc;
}
