// Checks of a whole language model (test_gpt.c: the GPT, test_llama.c: Llama and Qwen3) through
// the Stage API, for a model built unfused with ctx T and a vocabulary of V <= 256 rows:
// backprop of the whole chain against central differences, causal masking, forward mode
// against backprop (d = grad . v), and activity perturbation's per-sample derivatives against
// backprop's adjoints. Header-only, like test_util.h.
#ifndef FGPIPE_LM_CHECKS_H
#define FGPIPE_LM_CHECKS_H

#include <math.h>
#include <string.h>

#include "common.h"
#include "model.h"
#include "stage.h"
#include "tangent.h"
#include "test_util.h"

// Parameters at init from `seed`, moved away from it (0.3 x uniform noise).
static inline float *lm_params(const Model *m, uint32_t seed, uint64_t noise_seed) {
    float *p = fg_alloc_floats(m->n_params);
    model_init_params(m, p, seed);
    Rng r = {noise_seed};
    for (size_t i = 0; i < m->n_params; i++) p[i] += 0.3f * rng_uniform(&r);
    return p;
}

static inline double lm_loss(Stage *st, const float *p, const float *x, const Label *labels, int B) {
    const float *y;
    const Model *m = st->model;
    stage_forward(st, p, NULL, x, NULL, B, NULL, &y, NULL);
    return loss_forward(y, labels, B * m->tokens, model_logit_rows(m), NULL);
}

// Backprop against central differences along the first, middle and last element of every
// tensor; the last token changes no earlier position's logits; d = grad . v along the
// regenerated tangent (key_seed).
static inline void lm_check_gradients(const Model *m, const float *p0, uint32_t key_seed,
                                      uint64_t data_seed) {
    enum { B = 2 };
    const int T = m->tokens, V = m->logit_stride;
    FgError err = {0};
    float *p = fg_alloc_floats(m->n_params), *x = fg_alloc_floats((size_t)B * T);
    Label *labels = fg_alloc_bytes((size_t)B * T * sizeof(Label));
    memcpy(p, p0, m->n_params * sizeof(float));
    Rng r = {data_seed};
    for (int i = 0; i < B * T; i++)
        x[i] = (float)rng_int(&r, 0, m->classes - 1), labels[i] = (Label)rng_int(&r, 0, m->classes - 1);
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, m, 0, m->n_layers, B, 1, &err), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, B)), *dz = fg_alloc_floats((size_t)B * T * V);
    float *grad = fg_alloc_floats(m->n_params), *v = fg_alloc_floats(m->n_params);
    const float *y, *ydot;
    stage_forward(&st, p, NULL, x, NULL, B, stash, &y, NULL);
    loss_backward(y, labels, B * T, model_logit_rows(m), dz);
    stage_backward(&st, p, stash, dz, NULL, grad, B);
    for (int t = 0; t < m->n_tensors; t++) {
        const TensorView *tv = &m->tensors[t];
        size_t n = (size_t)tv->rows * tv->cols, picks[3] = {0, n / 2, n - 1};
        for (int j = 0; j < 3; j++) {
            size_t i = tv->offset + picks[j];
            float keep = p[i];
            const float eps = 1e-2f;
            p[i] = keep + eps;
            double up = lm_loss(&st, p, x, labels, B);
            p[i] = keep - eps;
            double down = lm_loss(&st, p, x, labels, B);
            p[i] = keep;
            double fd = (up - down) / (2 * eps);
            if (!(fabs(fd - grad[i]) <= 2e-3 * fabs(grad[i]) + 2e-4))
                fail_msg("%s[%zu]: fd %.6g vs backprop %.6g", tv->name, picks[j], fd, grad[i]);
        }
    }
    // Causal: a change to the last token of each sample changes no earlier position's logits.
    float *before = fg_alloc_floats((size_t)B * T * V), *x2 = fg_alloc_floats((size_t)B * T);
    stage_forward(&st, p, NULL, x, NULL, B, NULL, &y, NULL);
    memcpy(before, y, (size_t)B * T * V * sizeof(float));
    memcpy(x2, x, (size_t)B * T * sizeof(float));
    for (int b = 0; b < B; b++) x2[b * T + T - 1] = (float)(((int)x[b * T + T - 1] + 7) % m->classes);
    stage_forward(&st, p, NULL, x2, NULL, B, NULL, &y, NULL);
    for (int b = 0; b < B; b++) {
        size_t first = (size_t)b * T * V, earlier = (size_t)(T - 1) * V;
        assert_memory_equal(y + first, before + first, earlier * sizeof(float));
        assert_true(memcmp(y + first + earlier, before + first + earlier, V * sizeof(float)) != 0);
    }
    // Forward mode along the regenerated tangent: d = grad . v.
    TangentKey key = tangent_key(key_seed, 3, 0, 0);
    float d;
    stage_forward(&st, p, &key, x, NULL, B, NULL, &y, &ydot);
    loss_jvp(y, ydot, labels, B * T, model_logit_rows(m), 1, &d);
    memset(v, 0, m->n_params * sizeof(float));
    float one = 1.0f;
    stage_add_tangents(&st, key, 1, &one, v);
    double want = dot(grad, v, m->n_params);
    if (!(fabs(d - want) <= 1e-4 * (norm(grad, m->n_params) * norm(v, m->n_params))))
        fail_msg("jvp d = %.7g but grad . v = %.7g", d, want);
    fg_free(stash), fg_free(dz), fg_free(grad), fg_free(v), fg_free(p), fg_free(x), fg_free(x2);
    fg_free(labels), fg_free(before);
    stage_free(&st);
}

// Activity perturbation (docs/gpt.md): a tangent row per token on each parameter layer's
// branch columns; a sample's d (the mean over its tokens' row derivatives) equals the sum over
// layers and tokens of backprop's adjoint of the sample's loss . u.
static inline void lm_check_activity_d(const Model *m, const float *params, uint32_t key_seed,
                                       uint64_t data_seed) {
    enum { GB = 2, GK = 2 };
    const int GT = m->tokens, GV = m->logit_stride;
    FgError err = {0};
    Rng r = {data_seed};
    float *x = fg_alloc_floats((size_t)GB * GT);
    Label *labels = fg_alloc_bytes((size_t)GB * GT * sizeof(Label));
    for (int i = 0; i < GB * GT; i++)
        x[i] = (float)rng_int(&r, 0, m->classes - 1), labels[i] = (Label)rng_int(&r, 0, m->classes - 1);
    Stage fw, bw;
    assert_int_equal(stage_init(&fw, &backend_cpu, m, 0, m->n_layers, GB, GK, &err), FG_OK);
    fw.perturb = PERTURB_ACTIVITY;
    TangentKey key = tangent_key(key_seed, 4, 1, 0);
    const float *y, *ydot;
    float *drows = fg_alloc_floats((size_t)GK * GB * GT), d[GK][GB];
    memset(d, 0, sizeof d);
    stage_forward(&fw, params, &key, x, NULL, GB, NULL, &y, &ydot);
    loss_jvp_rows(y, ydot, labels, GB * GT, model_logit_rows(m), GK, drows);
    for (int k = 0; k < GK; k++)
        for (int b = 0; b < GB; b++)
            for (int t = 0; t < GT; t++) d[k][b] += drows[(k * GB + b) * GT + t] / GT;
    // Backprop: adjoints of sum_b l_b (l_b the mean over b's tokens = GB x the mean loss).
    assert_int_equal(stage_init(&bw, &backend_cpu, m, 0, m->n_layers, GB, 0, &err), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&bw, GB)), *dz = fg_alloc_floats((size_t)GB * GT * GV);
    float *delta = fg_alloc_floats(stage_adjoint_floats(&bw, GB));
    float *u = fg_alloc_floats((size_t)GB * GT * m->max_width);
    stage_forward(&bw, params, NULL, x, NULL, GB, stash, &y, NULL);
    loss_backward(y, labels, GB * GT, model_logit_rows(m), dz);
    for (size_t i = 0; i < (size_t)GB * GT * GV; i++) dz[i] *= GB;
    stage_backward_input(&bw, params, stash, dz, NULL, delta, GB);
    for (int k = 0; k < GK; k++)
        for (int b = 0; b < GB; b++) {
            double want = 0;
            for (int l = 0; l < m->n_layers; l++) {
                const Layer *L = &m->layers[l];
                if (!L->param_count) continue;
                int offset, width, out = layer_out_token(L);
                layer_branch(L, &offset, &width);
                TangentKey lk = key;
                lk.layer = (uint32_t)l, lk.k = (uint32_t)k, lk.stream = STREAM_ACTIVITY;
                tangent_fill(lk, 0, (size_t)GB * GT * width, u);
                const float *dl = delta + stage_adjoint_offset(&bw, l, GB);
                for (int t = 0; t < GT; t++) {
                    size_t row = (size_t)b * GT + t;
                    want += dot(dl + row * out + offset, u + row * width, (size_t)width);
                }
            }
            if (!(fabs(d[k][b] - want) <= 1e-4 * (1.0 + fabs(want))))
                fail_msg("sample %d, tangent %d: d %.7g, adjoints . u = %.7g", b, k, d[k][b], want);
        }
    fg_free(stash), fg_free(dz), fg_free(delta), fg_free(u), fg_free(drows), fg_free(x);
    fg_free(labels);
    stage_free(&fw), stage_free(&bw);
}

#endif
