// The GPT (docs/gpt.md) through the Stage API: the model's names, sizes and init; backprop of
// the whole chain against central differences and forward mode; causal masking; and activity
// perturbation's per-sample derivatives against backprop's adjoints (lm_checks.h). Each layer
// alone is checked in test_layers.c.
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
#include "lm_checks.h"
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

    enum { T = 4, V = 256 };
    GptShape g = {.n_layer = 1, .n_embd = 8, .n_head = 2, .ctx = T, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, g, &err), FG_OK);
    float *p = fg_alloc_floats(m.n_params);
    model_init_params(&m, p, SEED);
    size_t wte = (size_t)V * 8;
    assert_memory_equal(p, p + m.n_params - wte, wte * sizeof(float));  // the copies start equal
    assert_true(m.tensors[2].init_value == 1.0f && p[m.tensors[2].offset] == 1.0f);  // ln_1.weight
    fg_free(p);
    p = lm_params(&m, SEED, DATA_SEED);
    lm_check_gradients(&m, p, SEED, DATA_SEED);
    fg_free(p);
}

// Activity perturbation on the GPT (lm_checks.h).
static void test_gpt_activity_d(void **state) {
    (void)state;
    Model m;
    FgError err = {0};
    GptShape shape = {.n_layer = 1, .n_embd = 8, .n_head = 2, .ctx = 3, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, shape, &err), FG_OK);
    float *params = lm_params(&m, SEED, 5);
    lm_check_activity_d(&m, params, SEED, 5);
    fg_free(params);
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

// BF16 activations (stage_act.c): a stash keeps every layer's input but the model's (token ids)
// in BF16, two to a float's bytes, and the last layer's output (logits) in FP32; each layer's
// output is rounded once where it is made, so the forward with a stash gives the bits of the one
// without, every kept value is a BF16 value, and the loss and gradient stay near FP32's.
static void test_gpt_bf16_activations(void **state) {
    (void)state;
    enum { B = 2, T = 4, C = 8, V = 300 };
    FgError err = {0};
    Model m;
    GptShape g = {.n_layer = 1, .n_embd = C, .n_head = 2, .ctx = T, .vocab = V, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, g, &err), FG_OK);
    Rng r = {DATA_SEED};
    float x[B * T];
    Label labels[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (float)rng_int(&r, 0, V - 1), labels[i] = (Label)rng_int(&r, 0, V - 1);
    float *p = fg_alloc_floats(m.n_params), *grad[2];
    model_init_params(&m, p, SEED);
    double loss[2], g2[2] = {0}, dot = 0;
    for (int k = 0; k < 2; k++) {
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &m, 0, m.n_layers, B, 0, &err), FG_OK);
        if (k) stage_set_act_type(&st, FG_BF16);
        size_t expect = (size_t)B * m.layers[0].in + (size_t)B * m.layers[m.n_layers - 1].out;
        for (int l = 1; l < m.n_layers; l++) expect += ((size_t)B * m.layers[l].in + k) / (1 + k);
        assert_int_equal(stage_stash_floats(&st, B), expect);
        size_t logits = (size_t)B * T * m.logit_stride;
        float *stash = fg_alloc_floats(stage_stash_floats(&st, B)), *dz = fg_alloc_floats(logits);
        float *plain = fg_alloc_floats(logits);
        const float *y;
        stage_forward(&st, p, NULL, x, NULL, B, NULL, &y, NULL);
        memcpy(plain, y, logits * sizeof(float));
        stage_forward(&st, p, NULL, x, NULL, B, stash, &y, NULL);
        assert_memory_equal(plain, y, logits * sizeof(float));
        for (int l = 1; k && l < m.n_layers; l++) {
            const uint16_t *h = (const uint16_t *)(stash + stage_stash_offset(&st, l, B));
            const float *f = stage_act_load(&st, l, h, st.act[1], (size_t)B * m.layers[l].in);
            for (size_t i = 0; i < (size_t)B * m.layers[l].in; i++) assert_true(bf16_round(f[i]) == h[i]);
        }
        loss[k] = loss_backward(y, labels, B * T, model_logit_rows(&m), dz);
        grad[k] = fg_alloc_floats(m.n_params);
        stage_backward(&st, p, stash, dz, NULL, grad[k], B);
        fg_free(stash), fg_free(dz), fg_free(plain);
        stage_free(&st);
    }
    for (size_t i = 0; i < m.n_params; i++)
        g2[0] += (double)grad[0][i] * grad[0][i], g2[1] += (double)grad[1][i] * grad[1][i],
        dot += (double)grad[0][i] * grad[1][i];
    assert_true(loss[0] != loss[1]);  // the rounding happened
    assert_true(fabs(loss[0] - loss[1]) <= 1e-2 * fabs(loss[0]));
    assert_true(dot / sqrt(g2[0] * g2[1]) > 0.999);
    fg_free(p), fg_free(grad[0]), fg_free(grad[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_model),
        cmocka_unit_test(test_gpt_activity_d),
        cmocka_unit_test(test_gpt_padded_vocab),
        cmocka_unit_test(test_gpt_bf16_activations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
