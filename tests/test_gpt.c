// The GPT (docs/gpt.md) through the Stage API: the model's names, sizes and init; backprop of
// the whole chain against central differences and forward mode; causal masking; and activity
// perturbation's per-sample derivatives against backprop's adjoints. Each layer alone is
// checked in test_layers.c.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "layer.h"
#include "model.h"
#include "stage.h"
#include "tangent.h"
#include "test_util.h"

enum { SEED = 2024, DATA_SEED = 2 };

// ---------------------------------------------------------------------------------------------
// The GPT through the Stage API: names and sizes of the default shape, its init, and backprop
// of the whole chain (embedding, blocks, ln_f, tied head, loss over every token) against
// central differences, with forward mode agreeing (d = grad . v).
static void test_gpt_model(void **state) {
    (void)state;
    Model m;
    FgError err = {0};
    GptShape def = {.n_layer = 4, .n_embd = 128, .n_head = 4, .ctx = 128, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, def, &err), FG_OK);
    // 0.84M parameters, plus the head's copy of wte (256 x 128).
    assert_int_equal(m.n_params - 256 * 128, 842496);
    assert_int_equal(m.n_layers, 1 + 8 * 4 + 2);
    assert_string_equal(m.tensors[0].name, "wte.weight");
    assert_string_equal(m.tensors[1].name, "wpe.weight");
    assert_string_equal(m.tensors[4].name, "h.0.attn.c_attn.weight");
    assert_string_equal(m.tensors[m.n_tensors - 1].name, "lm_head.weight");
    assert_int_equal(m.tensors[4].rows, 3 * 128);
    GptShape bad = {.n_layer = 2, .n_embd = 10, .n_head = 4, .ctx = 8, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, bad, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "multiple of n_head"));

    enum { B = 2, T = 4, V = 256 };
    GptShape g = {.n_layer = 1, .n_embd = 8, .n_head = 2, .ctx = T, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, g, &err), FG_OK);
    float *p = fg_alloc_floats(m.n_params);
    model_init_params(&m, p, SEED);
    size_t wte = (size_t)V * 8;
    assert_memory_equal(p, p + m.n_params - wte, wte * sizeof(float));  // the copies start equal
    assert_true(m.tensors[2].init_value == 1.0f && p[m.tensors[2].offset] == 1.0f);  // ln_1.weight
    Rng r = {DATA_SEED};
    for (size_t i = 0; i < m.n_params; i++) p[i] += 0.3f * rng_uniform(&r);  // away from init
    float x[B * T];
    Label labels[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (float)rng_int(&r, 0, 20), labels[i] = (Label)rng_int(&r, 0, 20);

    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &m, 0, m.n_layers, B, 1, &err), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, B)), *dz = fg_alloc_floats((size_t)B * T * V);
    float *grad = fg_alloc_floats(m.n_params), *v = fg_alloc_floats(m.n_params);
    const float *y, *ydot;
    stage_forward(&st, p, NULL, x, NULL, B, stash, &y, NULL);
    loss_backward(y, labels, B * T, logit_rows(V), dz);
    stage_backward(&st, p, stash, dz, NULL, grad, B);
    // Central differences along coordinates of every tensor (first, middle, last element).
    for (int t = 0; t < m.n_tensors; t++) {
        const TensorView *tv = &m.tensors[t];
        size_t n = (size_t)tv->rows * tv->cols, picks[3] = {0, n / 2, n - 1};
        for (int j = 0; j < 3; j++) {
            size_t i = tv->offset + picks[j];
            float keep = p[i];
            const float eps = 1e-2f;
            p[i] = keep + eps;
            stage_forward(&st, p, NULL, x, NULL, B, NULL, &y, NULL);
            double up = loss_forward(y, labels, B * T, logit_rows(V), NULL);
            p[i] = keep - eps;
            stage_forward(&st, p, NULL, x, NULL, B, NULL, &y, NULL);
            double down = loss_forward(y, labels, B * T, logit_rows(V), NULL);
            p[i] = keep;
            double fd = (up - down) / (2 * eps);
            if (!(fabs(fd - grad[i]) <= 2e-3 * fabs(grad[i]) + 2e-4))
                fail_msg("%s[%zu]: fd %.6g vs backprop %.6g", tv->name, picks[j], fd, grad[i]);
        }
    }
    // Causal: a change to the last token of each sample changes no earlier position's logits.
    float *before = fg_alloc_floats((size_t)B * T * V);
    stage_forward(&st, p, NULL, x, NULL, B, NULL, &y, NULL);
    memcpy(before, y, (size_t)B * T * V * sizeof(float));
    float x2[B * T];
    memcpy(x2, x, sizeof x2);
    for (int b = 0; b < B; b++) x2[b * T + T - 1] = (float)(((int)x[b * T + T - 1] + 7) % V);
    stage_forward(&st, p, NULL, x2, NULL, B, NULL, &y, NULL);
    for (int b = 0; b < B; b++) {
        size_t first = (size_t)b * T * V, earlier = (size_t)(T - 1) * V;
        assert_memory_equal(y + first, before + first, earlier * sizeof(float));
        assert_true(memcmp(y + first + earlier, before + first + earlier, V * sizeof(float)) != 0);
    }
    fg_free(before);
    // Forward mode along the regenerated tangent: d = grad . v.
    TangentKey key = tangent_key(SEED, 3, 0, 0);
    float d;
    stage_forward(&st, p, &key, x, NULL, B, NULL, &y, &ydot);
    loss_jvp(y, ydot, labels, B * T, logit_rows(V), 1, &d);
    memset(v, 0, m.n_params * sizeof(float));
    float one = 1.0f;
    stage_add_tangents(&st, key, 1, &one, v);
    double want = dot(grad, v, m.n_params);
    if (!(fabs(d - want) <= 1e-4 * (norm(grad, m.n_params) * norm(v, m.n_params))))
        fail_msg("jvp d = %.7g but grad . v = %.7g", d, want);
    fg_free(stash), fg_free(dz), fg_free(grad), fg_free(v), fg_free(p);
    stage_free(&st);
}

// ---------------------------------------------------------------------------------------------
// Activity perturbation on the GPT (docs/gpt.md): a tangent row per token on each parameter
//    layer's branch columns; a sample's d (the mean over its tokens' row derivatives) equals
//    sum over layers and tokens of backprop's adjoint of the sample's loss . u.

static void test_gpt_activity_d(void **state) {
    (void)state;
    enum { GB = 2, GT = 3, GV = 256, GK = 2 };
    Model m;
    FgError err = {0};
    GptShape shape = {.n_layer = 1, .n_embd = 8, .n_head = 2, .ctx = GT, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, shape, &err), FG_OK);
    float *params = fg_alloc_floats(m.n_params);
    model_init_params(&m, params, SEED);
    Rng r = {5};
    for (size_t i = 0; i < m.n_params; i++) params[i] += 0.3f * rng_uniform(&r);
    float x[GB * GT];
    Label labels[GB * GT];
    for (int i = 0; i < GB * GT; i++) x[i] = (float)rng_int(&r, 0, 255), labels[i] = (Label)rng_int(&r, 0, 255);

    // Forward mode: per-row derivatives, then each sample's mean over its tokens.
    Stage fw, bw;
    assert_int_equal(stage_init(&fw, &backend_cpu, &m, 0, m.n_layers, GB, GK, &err), FG_OK);
    fw.perturb = PERTURB_ACTIVITY;
    TangentKey key = tangent_key(SEED, 4, 1, 0);
    const float *y, *ydot;
    float drows[GK * GB * GT], d[GK][GB] = {{0}};
    stage_forward(&fw, params, &key, x, NULL, GB, NULL, &y, &ydot);
    loss_jvp_rows(y, ydot, labels, GB * GT, logit_rows(GV), GK, drows);
    for (int k = 0; k < GK; k++)
        for (int b = 0; b < GB; b++)
            for (int t = 0; t < GT; t++) d[k][b] += drows[(k * GB + b) * GT + t] / GT;

    // Backprop: adjoints of sum_b l_b (l_b the mean over b's tokens = GB x the mean loss).
    assert_int_equal(stage_init(&bw, &backend_cpu, &m, 0, m.n_layers, GB, 0, &err), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&bw, GB)), *dz = fg_alloc_floats(GB * GT * GV);
    float *delta = fg_alloc_floats(stage_adjoint_floats(&bw, GB)), *u = fg_alloc_floats(GB * GT * 1024);
    stage_forward(&bw, params, NULL, x, NULL, GB, stash, &y, NULL);
    loss_backward(y, labels, GB * GT, logit_rows(GV), dz);
    for (int i = 0; i < GB * GT * GV; i++) dz[i] *= GB;
    stage_backward_input(&bw, params, stash, dz, NULL, delta, GB);
    for (int k = 0; k < GK; k++)
        for (int b = 0; b < GB; b++) {
            double want = 0;
            for (int l = 0; l < m.n_layers; l++) {
                const Layer *L = &m.layers[l];
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
                fail_msg("GPT sample %d, tangent %d: d %.7g, adjoints . u = %.7g", b, k, d[k][b], want);
        }
    fg_free(stash), fg_free(dz), fg_free(delta), fg_free(u), fg_free(params);
    stage_free(&fw), stage_free(&bw);
}

// A padded vocabulary (pad_vocab) changes nothing but the table's size: with the same seed the
// shared rows start equal, the loss and the gradient of every shared parameter match the
// unpadded model's, and the pad rows get no gradient (so they never move) and are never
// scored (their logits sit outside the softmax).
static void test_gpt_padded_vocab(void **state) {
    (void)state;
    enum { B = 2, T = 4, C = 8, V = 300, VP = 320 };
    FgError err = {0};
    Model m[2];
    float *p[2], *grad[2];
    double loss[2];
    Rng r = {DATA_SEED};
    float x[B * T];
    Label labels[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (float)rng_int(&r, 0, V - 1), labels[i] = (Label)rng_int(&r, 0, V - 1);
    for (int k = 0; k < 2; k++) {
        GptShape g = {.n_layer = 1, .n_embd = C, .n_head = 2, .ctx = T, .vocab = V, .pad_vocab = k ? 64 : 1};
        assert_int_equal(model_build_gpt(&m[k], g, &err), FG_OK);
        assert_int_equal(m[k].classes, V);
        assert_int_equal(m[k].logit_stride, k ? VP : V);
        p[k] = fg_alloc_floats(m[k].n_params);
        grad[k] = fg_alloc_floats(m[k].n_params);
        model_init_params(&m[k], p[k], SEED);
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &m[k], 0, m[k].n_layers, B, 0, &err), FG_OK);
        float *stash = fg_alloc_floats(stage_stash_floats(&st, B));
        float *dz = fg_alloc_floats((size_t)B * T * m[k].logit_stride);
        const float *y;
        stage_forward(&st, p[k], NULL, x, NULL, B, stash, &y, NULL);
        loss[k] = loss_backward(y, labels, B * T, model_logit_rows(&m[k]), dz);
        for (int row = 0; k && row < B * T; row++)
            for (int j = V; j < VP; j++) assert_true(dz[(size_t)row * VP + j] == 0.0f);
        stage_backward(&st, p[k], stash, dz, NULL, grad[k], B);
        fg_free(stash);
        fg_free(dz);
        stage_free(&st);
    }
    assert_true(fabs(loss[0] - loss[1]) <= 1e-6 * fabs(loss[0]));
    for (int t = 0; t < m[0].n_tensors; t++) {
        const TensorView *a = &m[0].tensors[t], *b = &m[1].tensors[t];
        size_t shared = (size_t)a->rows * a->cols;  // the first rows of a padded table
        for (size_t i = 0; i < shared; i++) {
            assert_true(p[0][a->offset + i] == p[1][b->offset + i]);
            if (fabsf(grad[0][a->offset + i] - grad[1][b->offset + i]) > 1e-6f)
                fail_msg("%s[%zu]: gradient %g unpadded, %g padded", a->name, i,
                         grad[0][a->offset + i], grad[1][b->offset + i]);
        }
        for (size_t i = shared; i < (size_t)b->rows * b->cols; i++)
            assert_true(grad[1][b->offset + i] == 0.0f);
    }
    for (int k = 0; k < 2; k++) fg_free(p[k]), fg_free(grad[k]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_model),
        cmocka_unit_test(test_gpt_activity_d),
        cmocka_unit_test(test_gpt_padded_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
