#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "philox.h"
#include "stage.h"

typedef struct {
    const Model *model;
    float *params;
} FlatParams;

static int visit_flat(void *source, int writable, LayerVisitor visit, void *arg, FgError *err) {
    (void)writable;
    FlatParams *f = source;
    float *bufs[1] = {f->params};
    return model_visit_layers(f->model, 0, f->model->n_layers, bufs, 1, visit, arg, err);
}

// The model of the checkpoint's stored config, with its parameters.
static int load_gpt(const GenerateArgs *a, Storage *io, Model *m, float **params, FgError *err) {
    char *text = NULL;
    Config c;
    config_defaults(&c);
    int rc = io->load_config(io, a->checkpoint, &text, err);
    if (!rc) rc = config_load_text(&c, text, a->checkpoint, err);
    free(text);
    if (rc) return rc;
    if (c.input.data != DATA_TEXT)
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s holds model '%s', not a gpt: generate "
                       "samples text from a GPT", a->checkpoint, c.net.model);
    GptShape g = {.n_layer = c.net.n_layer, .n_embd = c.net.n_embd, .n_head = c.net.n_head, .ctx = c.net.ctx};
    if ((rc = model_build_gpt(m, g, err))) return rc;
    *params = fg_alloc_floats(m->n_params);
    FlatParams src = {m, *params};
    CheckpointState st = {.model = m, .first = 0, .last = m->n_layers, .n_buffers = 1,
                          .buffers = {"params"}, .visit_layers = visit_flat, .source = &src};
    return io->load(io, &st, a->checkpoint, err);
}

// The next byte from logits [256]: the most likely at temperature 0, else a draw from the
// softmax of logits / temperature over the top_k most likely, with uniform u in [0, 1).
static int sample_byte(const float *logits, double temperature, int top_k, float u) {
    int best = 0;
    for (int i = 1; i < 256; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    int k = top_k > 0 && top_k < 256 ? top_k : 256;
    float kth = -INFINITY;  // the k-th largest logit: bytes below it are left out
    if (k < 256) {
        float sorted[256];
        memcpy(sorted, logits, sizeof sorted);
        for (int i = 0; i < k; i++)  // partial selection sort: k passes
            for (int j = i + 1; j < 256; j++)
                if (sorted[j] > sorted[i]) {
                    float t = sorted[i];
                    sorted[i] = sorted[j], sorted[j] = t;
                }
        kth = sorted[k - 1];
    }
    double w[256], sum = 0;
    for (int i = 0; i < 256; i++) {
        w[i] = logits[i] >= kth ? exp((logits[i] - logits[best]) / temperature) : 0.0;
        sum += w[i];
    }
    double target = u * sum, acc = 0;
    for (int i = 0; i < 256; i++)
        if (w[i] > 0 && (acc += w[i]) > target) return i;
    return best;
}

static float uniform_at(uint32_t seed, uint32_t position) {
    Philox4 ctr = {{position, 0x67656e65u /* "gene" */, 0, 0}};
    Philox4 r = philox4x32_10(ctr, seed, 0x7465787au /* "text" */);
    return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

int generate_text(const GenerateArgs *a, Storage *io, FILE *out, FgError *err) {
    Model m;
    float *params = NULL;
    int rc = load_gpt(a, io, &m, &params, err);
    Stage st = {0};
    if (!rc) rc = stage_init(&st, &backend_cpu, &m, 0, m.n_layers, 1, 0, err);
    if (rc) {
        fg_free(params);
        return rc;
    }
    const int T = m.tokens;
    size_t n_prompt = strlen(a->prompt), n = n_prompt ? n_prompt : 1;
    unsigned char *text = malloc(n + (size_t)a->tokens);
    if (n_prompt) memcpy(text, a->prompt, n_prompt);
    else text[0] = '\n';
    fwrite(text, 1, n, out);
    float *x = fg_alloc_floats((size_t)T);
    for (int i = 0; i < a->tokens; i++) {
        // The window: the last T bytes; positions after them are padding that causal attention
        // keeps from the prediction at the window's last byte.
        size_t start = n > (size_t)T ? n - T : 0, len = n - start;
        memset(x, 0, (size_t)T * sizeof(float));
        for (size_t t = 0; t < len; t++) x[t] = (float)text[start + t];
        const float *logits;
        stage_forward(&st, params, NULL, x, NULL, 1, NULL, &logits, NULL);
        int byte = sample_byte(logits + (len - 1) * 256, a->temperature, a->top_k,
                               uniform_at(a->seed, (uint32_t)i));
        text[n++] = (unsigned char)byte;
        fputc(byte, out);
        fflush(out);
    }
    fputc('\n', out);
    fg_free(x);
    free(text);
    stage_free(&st);
    fg_free(params);
    return FG_OK;
}
