// A whole small MLP through the Stage API: backprop against finite differences, the forward
// gradient as an unbiased estimate of it, batched tangents, splitting into stages, and the
// model description parser.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bf16.h"
#include "common.h"
#include "layer.h"
#include "model.h"
#include "op_cost.h"
#include "partition.h"
#include "stage.h"
#include "tangent.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Helpers

enum { ROWS = 8, SEED = 2024, DATA_SEED = 2 };
#define WIDTHS "6-5-4-3"

// A small model with its parameters and one micro-batch of data.
typedef struct {
    Model m;
    float *params;
    float x[ROWS * 6];
    Label labels[ROWS];
} Net;

static void net_make(Net *n, const char *activation) {
    FgError err = {0};
    assert_int_equal(model_build_mlp(&n->m, WIDTHS, activation, &err), FG_OK);
    n->params = fg_alloc_floats(n->m.n_params);
    model_init_params(&n->m, n->params, SEED);
    // Non-zero biases too, so their gradients are exercised away from the initial point.
    Rng r = {DATA_SEED};
    for (size_t i = 0; i < n->m.n_params; i++) n->params[i] += 0.2f * rng_uniform(&r);
    for (int i = 0; i < ROWS * 6; i++) n->x[i] = 2.0f * rng_uniform(&r);
    for (int b = 0; b < ROWS; b++) n->labels[b] = (Label)(b % 3);
}

static TangentKey key_at(uint32_t step) {
    TangentKey key = {.seed = SEED, .stream = STREAM_TANGENT, .step = step, .microbatch = 0};
    return key;
}

// Mean loss of the micro-batch at params (plain forward, no tangents, no stash).
static float net_loss(const Net *n, Stage *st, const float *params) {
    const float *y;
    stage_forward(st, params, NULL, n->x, NULL, ROWS, NULL, &y, NULL);
    return loss_forward(y, n->labels, ROWS, model_logit_rows(&n->m), NULL);
}

// The backprop gradient of the mean loss, into grad (overwritten).
static void net_gradient(const Net *n, float *grad) {
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &n->m, 0, n->m.n_layers, ROWS, 0, NULL), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, ROWS));
    float dz[ROWS * 3];
    const float *y;
    stage_forward(&st, n->params, NULL, n->x, NULL, ROWS, stash, &y, NULL);
    loss_backward(y, n->labels, ROWS, model_logit_rows(&n->m), dz);
    memset(grad, 0, n->m.n_params * sizeof(float));
    stage_backward(&st, n->params, stash, dz, NULL, grad, ROWS);
    fg_free(stash);
    stage_free(&st);
}

// Directional derivatives d[k] of the loss along the K tangents of `step`, by forward mode.
static float net_directional(const Net *n, Stage *st, uint32_t step, float *d) {
    TangentKey key = key_at(step);
    const float *y, *ydot;
    stage_forward(st, n->params, &key, n->x, NULL, ROWS, NULL, &y, &ydot);
    return loss_jvp(y, ydot, n->labels, ROWS, model_logit_rows(&n->m), st->tangents, d);
}

static const char *const ACTIVATIONS[] = {"relu", "gelu"};

// ---------------------------------------------------------------------------------------------
// 1. Backprop gradient = central differences of the mean loss, over every parameter.

// ReLU makes the loss piecewise smooth: finite differences are only valid when no step moves a
// pre-activation across zero. Check that this data keeps them clear of it.
static void assert_relu_inputs_clear_of_kink(const Net *n, float margin) {
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &n->m, 0, n->m.n_layers, ROWS, 0, NULL), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, ROWS));
    const float *y;
    stage_forward(&st, n->params, NULL, n->x, NULL, ROWS, stash, &y, NULL);
    size_t off = 0;  // the stash holds each layer's input in order
    for (int l = 0; l < n->m.n_layers; l++) {
        const Layer *L = &n->m.layers[l];
        if (L->kind == LAYER_RELU)
            for (size_t i = 0; i < (size_t)ROWS * L->in; i++)
                if (!(fabsf(stash[off + i]) > margin))
                    fail_msg("%s input %zu = %g is too close to the kink for the FD test", L->name,
                             i, stash[off + i]);
        off += (size_t)ROWS * L->in;
    }
    fg_free(stash);
    stage_free(&st);
}

typedef struct {
    const Net *n;
    Stage *st;
} LossAt;

static double loss_at(void *arg) {  // the mean loss at the net's current params
    const LossAt *a = arg;
    return net_loss(a->n, a->st, a->n->params);
}

static void test_backprop_matches_finite_differences(void **state) {
    (void)state;
    // 1e-3 resolves the ~1 loss in float to ~1e-4 per coordinate (loss rounding ~1e-7 / 2e-3)
    // while keeping the O(eps^2) truncation of the smooth pieces negligible.
    const float eps = 1e-3f;
    for (int a = 0; a < 2; a++) {
        Net n;
        net_make(&n, ACTIVATIONS[a]);
        if (n.m.layers[1].kind == LAYER_RELU) assert_relu_inputs_clear_of_kink(&n, 0.02f);
        size_t dim = n.m.n_params;
        float *g = fg_alloc_floats(dim), *fd = fg_alloc_floats(dim);
        net_gradient(&n, g);
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &n.m, 0, n.m.n_layers, ROWS, 0, NULL), FG_OK);
        LossAt at = {&n, &st};
        for (size_t i = 0; i < dim; i++)
            fd[i] = (float)central_difference(n.params, i, eps, loss_at, &at);
        double rel = dist(g, fd, dim) / norm(g, dim);
        if (!(rel < 2e-3)) fail_msg("%s: |bp - fd| / |bp| = %g", ACTIVATIONS[a], rel);
        assert_true(norm(g, dim) > 1e-2);  // a gradient worth comparing
        stage_free(&st);
        fg_free(g), fg_free(fd), fg_free(n.params);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The forward gradient d v (d = grad . v by forward mode) is an unbiased estimate of grad.

static void test_forward_gradient_is_unbiased(void **state) {
    (void)state;
    enum { T = 20000 };
    for (int a = 0; a < 2; a++) {
        Net n;
        net_make(&n, ACTIVATIONS[a]);
        size_t dim = n.m.n_params;
        float *g = fg_alloc_floats(dim), *mean = fg_alloc_floats(dim), *v = fg_alloc_floats(dim);
        net_gradient(&n, g);
        double ng = norm(g, dim);
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &n.m, 0, n.m.n_layers, ROWS, 1, NULL), FG_OK);
        for (uint32_t t = 0; t < T; t++) {
            float d;
            net_directional(&n, &st, t, &d);
            // Forward mode is the exact directional derivative: d = g . v up to float rounding.
            double gv;
            stage_tangent_dots(&st, key_at(t), 1, g, &gv);
            float one = 1.0f, coeff = d / T;
            memset(v, 0, dim * sizeof(float));
            stage_add_tangents(&st, key_at(t), 1, &one, v);
            if (!(fabs(d - gv) <= 1e-4 * ng * norm(v, dim)))
                fail_msg("%s step %u: d = %.8g but g . v = %.8g", ACTIVATIONS[a], t, d, gv);
            stage_add_tangents(&st, key_at(t), 1, &coeff, mean);
        }
        // For v ~ N(0, I), E[(g.v) v] = g and E|(g.v) v - g|^2 = (dim + 2)|g|^2 - |g|^2
        // = (dim + 1)|g|^2 (E[v v^T (g.v)^2] = |g|^2 I + 2 g g^T). The mean of T draws thus has
        // E|mean - g|^2 = (dim + 1)|g|^2 / T; a sum over dim coordinates concentrates well,
        // so 4x above (or below) it only fails for a biased estimate or tangents that are not
        // fresh, independent N(0, 1) draws per step.
        double err2 = dist(mean, g, dim) * dist(mean, g, dim);
        double expected = (double)(dim + 1) * ng * ng / T;
        if (!(err2 <= 4.0 * expected && err2 >= expected / 4.0))
            fail_msg("%s: |mean - g|^2 = %g, expected about %g", ACTIVATIONS[a], err2, expected);
        double cosine = dot(mean, g, dim) / (norm(mean, dim) * ng);
        assert_true(cosine > 0.9);
        stage_free(&st);
        fg_free(g), fg_free(mean), fg_free(v), fg_free(n.params);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. K tangents at once = one tangent at a time.

// d along tangent k of `step` alone: the layers run one by one with K = 1 and that tangent's
// parameter directions, regenerated from the same key (global layer index, k).
static float directional_one(const Net *n, uint32_t step, uint32_t k) {
    const Model *m = &n->m;
    float *buf[4], *pdot = fg_alloc_floats(m->n_params);
    for (int i = 0; i < 4; i++) buf[i] = fg_alloc_floats((size_t)ROWS * m->max_width);
    const float *x = n->x, *xdot = NULL;
    for (int l = 0; l < m->n_layers; l++) {
        const Layer *L = &m->layers[l];
        TangentKey key = key_at(step);
        key.layer = (uint32_t)l, key.k = k;
        tangent_fill(key, 0, L->param_count, pdot);
        float *y = buf[2 * (l & 1)], *ydot = buf[2 * (l & 1) + 1];
        layer_ops(L)->jvp(L, n->params + L->param_offset, L->param_count ? pdot : NULL, x, xdot,
                          y, ydot, ROWS, 1);
        x = y, xdot = ydot;
    }
    float d;
    loss_jvp(x, xdot, n->labels, ROWS, model_logit_rows(m), 1, &d);
    for (int i = 0; i < 4; i++) fg_free(buf[i]);
    fg_free(pdot);
    return d;
}

static void test_batched_tangents_match_single(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++) {
        Net n;
        net_make(&n, ACTIVATIONS[a]);
        Stage st3, st1;
        assert_int_equal(stage_init(&st3, &backend_cpu, &n.m, 0, n.m.n_layers, ROWS, 3, NULL), FG_OK);
        assert_int_equal(stage_init(&st1, &backend_cpu, &n.m, 0, n.m.n_layers, ROWS, 1, NULL), FG_OK);
        for (uint32_t step = 0; step < 5; step++) {
            float d3[3], d1;
            float l3 = net_directional(&n, &st3, step, d3);
            float l1 = net_directional(&n, &st1, step, &d1);
            assert_true(l3 == l1);
            // Tangent 0 of a K = 3 stage is the tangent of a K = 1 stage. Within 1e-5 relative:
            // the K tangents' rows go through one GEMM of K times the rows, whose kernels (oneDNN's)
            // block the sums by the row count; a wrong tangent would differ by O(1).
            assert_true(fabs(d3[0] - d1) <= 1e-5 * fabs(d1) + 1e-9);
            for (uint32_t k = 0; k < 3; k++) {
                float single = directional_one(&n, step, k);
                if (!(fabs(d3[k] - single) <= 1e-5 * fabs(single) + 1e-9))
                    fail_msg("%s step %u k %u: batched %.9g vs single %.9g", ACTIVATIONS[a], step,
                             k, d3[k], single);
            }
            // Different k are different directions.
            assert_true(d3[0] != d3[1] && d3[1] != d3[2]);
        }
        stage_free(&st3), stage_free(&st1);
        fg_free(n.params);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Two stages [0, cut) and [cut, n) compute exactly what one stage [0, n) does.

typedef struct {
    float loss, d[2];
    float *grad;  // [n_params]
} Pass;

// Whether the n floats of x are BF16 values (what crosses a cut in a BF16 pass).
static int bf16_values(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (bf16_to_f32(bf16_round(x[i])) != x[i]) return 0;
    return 1;
}

// Forward with tangents and stash, loss, backward, over the stages [cuts[i], cuts[i+1]), their
// activations, tangents and adjoints between layers of element type `type` (stage_act.c): in
// BF16, what crosses a cut (activations, the K tangents, the input adjoint) is BF16 values.
static void run_pass(const Net *n, const int *cuts, int n_stages, uint32_t step, FgDtype type, Pass *out) {
    enum { K = 2 };
    Stage st[2];
    float *stash[2], *dx = fg_alloc_floats((size_t)ROWS * n->m.max_width), dz[ROWS * 3];
    TangentKey key = key_at(step);
    const float *x = n->x, *xdot = NULL, *y = NULL, *ydot = NULL;
    for (int s = 0; s < n_stages; s++) {
        assert_int_equal(stage_init(&st[s], &backend_cpu, &n->m, cuts[s], cuts[s + 1], ROWS, K, NULL), FG_OK);
        stage_set_act_type(&st[s], type);
        stash[s] = fg_alloc_floats(stage_stash_floats(&st[s], ROWS));
        stage_forward(&st[s], n->params + st[s].param_base, &key, x, xdot, ROWS, stash[s], &y,
                      &ydot);
        const size_t out_n = (size_t)ROWS * n->m.layers[cuts[s + 1] - 1].out;
        if (type == FG_BF16 && s + 1 < n_stages) assert_true(bf16_values(y, out_n) && bf16_values(ydot, K * out_n));
        x = y, xdot = ydot;
    }
    out->loss = loss_jvp(y, ydot, n->labels, ROWS, model_logit_rows(&n->m), K, out->d);
    loss_backward(y, n->labels, ROWS, model_logit_rows(&n->m), dz);
    memset(out->grad, 0, n->m.n_params * sizeof(float));
    const float *dy = dz;
    float *dxs[2] = {NULL, dx};  // the first stage needs no input adjoint
    for (int s = n_stages - 1; s >= 0; s--) {
        stage_backward(&st[s], n->params + st[s].param_base, stash[s], dy, dxs[s],
                       out->grad + st[s].param_base, ROWS);
        if (type == FG_BF16 && s) assert_true(bf16_values(dxs[s], (size_t)ROWS * n->m.layers[cuts[s]].in));
        dy = dxs[s];
    }
    for (int s = 0; s < n_stages; s++) fg_free(stash[s]), stage_free(&st[s]);
    fg_free(dx);
}

static void test_stage_split_is_exact(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++) {
        Net n;
        net_make(&n, ACTIVATIONS[a]);
        int L = n.m.n_layers;
        size_t dim = n.m.n_params;
        Pass whole = {.grad = fg_alloc_floats(dim)}, split = {.grad = fg_alloc_floats(dim)};
        int one[2] = {0, L};
        run_pass(&n, one, 1, 3, FG_F32, &whole);
        for (int cut = 1; cut < L; cut++) {
            int two[3] = {0, cut, L};
            run_pass(&n, two, 2, 3, FG_F32, &split);
            assert_memory_equal(&whole.loss, &split.loss, sizeof whole.loss);
            assert_memory_equal(whole.d, split.d, sizeof whole.d);
            assert_memory_equal(whole.grad, split.grad, dim * sizeof(float));

            // The tangent sums of the estimators, stage by stage into the stage's own slice.
            enum { NMB = 2, K = 2 };
            Stage all, s0, s1;
            assert_int_equal(stage_init(&all, &backend_cpu, &n.m, 0, L, ROWS, K, NULL), FG_OK);
            assert_int_equal(stage_init(&s0, &backend_cpu, &n.m, 0, cut, ROWS, K, NULL), FG_OK);
            assert_int_equal(stage_init(&s1, &backend_cpu, &n.m, cut, L, ROWS, K, NULL), FG_OK);
            assert_true(s0.param_count + s1.param_count == dim);
            assert_true(s1.param_base == s0.param_count);
            const float coeff[NMB * K] = {0.5f, -1.25f, 2.0f, 0.125f};
            float *e_all = fg_alloc_floats(dim), *e_split = fg_alloc_floats(dim);
            stage_add_tangents(&all, key_at(9), NMB, coeff, e_all);
            stage_add_tangents(&s0, key_at(9), NMB, coeff, e_split);
            stage_add_tangents(&s1, key_at(9), NMB, coeff, e_split + s1.param_base);
            assert_memory_equal(e_all, e_split, dim * sizeof(float));
            // Dots: the whole stage sums its layers in one chain, the split one in two, then
            // adds them: equal up to double rounding of a different association, not bitwise.
            double d_all[NMB * K], d0[NMB * K], d1[NMB * K];
            stage_tangent_dots(&all, key_at(9), NMB, whole.grad, d_all);
            stage_tangent_dots(&s0, key_at(9), NMB, whole.grad, d0);
            stage_tangent_dots(&s1, key_at(9), NMB, whole.grad + s1.param_base, d1);
            for (int i = 0; i < NMB * K; i++)
                assert_true(fabs(d_all[i] - (d0[i] + d1[i])) <= 1e-12 * (fabs(d0[i]) + fabs(d1[i])));
            // ... and for the tangents of micro-batch 1, a key starting there agrees.
            double d_mb1[K];
            TangentKey k1 = key_at(9);
            k1.microbatch = 1;
            stage_tangent_dots(&all, k1, 1, whole.grad, d_mb1);
            assert_memory_equal(d_mb1, d_all + K, sizeof d_mb1);
            // Likewise two micro-batches at once = one call per micro-batch (same order of adds).
            float *e_each = fg_alloc_floats(dim);
            stage_add_tangents(&all, key_at(9), 1, coeff, e_each);
            stage_add_tangents(&all, k1, 1, coeff + K, e_each);
            assert_memory_equal(e_all, e_each, dim * sizeof(float));
            fg_free(e_each);
            // add_tangents and tangent_dots regenerate the same v: <sum c v, x> = sum c (v . x).
            double lhs = dot(e_all, whole.grad, dim), rhs = 0.0, scale = 0.0;
            for (int i = 0; i < NMB * K; i++)
                rhs += coeff[i] * d_all[i], scale += fabs(coeff[i] * d_all[i]);
            assert_true(fabs(lhs - rhs) <= 1e-5 * scale);
            fg_free(e_all), fg_free(e_split);
            stage_free(&all), stage_free(&s0), stage_free(&s1);
        }
        // The forward-mode d of the whole pass is the gradient's dot with the same tangent.
        Stage all;
        assert_int_equal(stage_init(&all, &backend_cpu, &n.m, 0, L, ROWS, 2, NULL), FG_OK);
        double gv[2];
        stage_tangent_dots(&all, key_at(3), 1, whole.grad, gv);
        for (int k = 0; k < 2; k++) assert_true(fabs(whole.d[k] - gv[k]) <= 1e-4 * fabs(gv[k]) + 1e-6);
        stage_free(&all);
        fg_free(whole.grad), fg_free(split.grad), fg_free(n.params);
    }
}

// BF16 between layers (precision = bf16): every layer's output and output tangents rounded to
// BF16 where they are made, every input adjoint where B makes it, so 2 stages give the loss,
// the directional derivatives and the gradient of 1 bit for bit wherever the cut falls, and
// the rounding did happen (the pass is not FP32's).
static void test_stage_split_is_exact_bf16(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++) {
        Net n;
        net_make(&n, ACTIVATIONS[a]);
        const int L = n.m.n_layers;
        const size_t dim = n.m.n_params;
        Pass fp32 = {.grad = fg_alloc_floats(dim)}, whole = {.grad = fg_alloc_floats(dim)},
             split = {.grad = fg_alloc_floats(dim)};
        int one[2] = {0, L};
        run_pass(&n, one, 1, 3, FG_F32, &fp32);
        run_pass(&n, one, 1, 3, FG_BF16, &whole);
        assert_true(memcmp(fp32.d, whole.d, sizeof whole.d) != 0);
        assert_true(memcmp(fp32.grad, whole.grad, dim * sizeof(float)) != 0);
        for (int cut = 1; cut < L; cut++) {
            int two[3] = {0, cut, L};
            run_pass(&n, two, 2, 3, FG_BF16, &split);
            assert_memory_equal(&whole.loss, &split.loss, sizeof whole.loss);
            assert_memory_equal(whole.d, split.d, sizeof whole.d);
            assert_memory_equal(whole.grad, split.grad, dim * sizeof(float));
        }
        fg_free(fp32.grad), fg_free(whole.grad), fg_free(split.grad), fg_free(n.params);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. model_build_mlp: errors, parameter counts, tensor names and layout.

static void assert_build_fails(const char *widths, const char *activation, const char *mention) {
    Model m;
    FgError err = {0};
    int rc = model_build_mlp(&m, widths, activation, &err);
    if (rc != FG_ERR_INPUT || err.code != FG_ERR_INPUT)
        fail_msg("'%s' '%s': returned %d (code %d), wanted FG_ERR_INPUT", widths, activation, rc,
                 err.code);
    if (!strstr(err.msg, mention))
        fail_msg("'%s' '%s': message \"%s\" does not mention '%s'", widths, activation, err.msg,
                 mention);
}

static void test_model_build(void **state) {
    (void)state;
    assert_build_fails("784-0-10", "relu", "784-0-10");
    assert_build_fails("784--10", "relu", "784--10");
    assert_build_fails("abc", "relu", "abc");
    assert_build_fails("", "relu", "at least two");
    assert_build_fails("10", "relu", "at least two");
    assert_build_fails("10-x", "gelu", "10-x");
    assert_build_fails("784-1024-10", "tanh", "tanh");

    Model m;
    FgError err = {0};
    assert_int_equal(model_build_mlp(&m, "784-1024-10", "gelu", &err), FG_OK);
    assert_true(m.n_params == (size_t)784 * 1024 + 1024 + 1024 * 10 + 10);
    assert_int_equal(m.n_layers, 3);
    assert_int_equal(m.in_features, 784);
    assert_int_equal(m.classes, 10);
    assert_int_equal(m.max_width, 1024);
    const char *layer_names[] = {"fc1", "gelu1", "fc2"};
    const LayerKind kinds[] = {LAYER_LINEAR, LAYER_GELU, LAYER_LINEAR};
    for (int l = 0; l < 3; l++) {
        assert_string_equal(m.layers[l].name, layer_names[l]);
        assert_int_equal(m.layers[l].kind, kinds[l]);
        assert_int_equal(m.layers[l].index, l);
    }
    assert_true(m.layers[1].in == 1024 && m.layers[1].out == 1024 && m.layers[1].param_count == 0);

    struct { const char *name; int layer, rows, cols; } want[] = {
        {"fc1.weight", 0, 1024, 784}, {"fc1.bias", 0, 1024, 1},
        {"fc2.weight", 2, 10, 1024},  {"fc2.bias", 2, 10, 1},
    };
    assert_int_equal(m.n_tensors, 4);
    size_t offset = 0;  // the views tile the flat buffer in order, without gaps
    for (int t = 0; t < 4; t++) {
        const TensorView *tv = &m.tensors[t];
        assert_string_equal(tv->name, want[t].name);
        assert_int_equal(tv->layer, want[t].layer);
        assert_int_equal(tv->rows, want[t].rows);
        assert_int_equal(tv->cols, want[t].cols);
        assert_true(tv->offset == offset);
        offset += (size_t)tv->rows * tv->cols;
    }
    assert_true(offset == m.n_params);
    assert_true(m.layers[0].param_offset == 0 && m.layers[2].param_offset == m.tensors[2].offset);
    assert_true(model_range_offset(&m, 1) == m.layers[0].param_count);
    assert_true(model_range_count(&m, 1, 3) == (size_t)1024 * 10 + 10);
    assert_true(model_range_offset(&m, 3) == m.n_params);

    // Deeper: relu after every linear layer but the last, numbered after it.
    assert_int_equal(model_build_mlp(&m, WIDTHS, "relu", &err), FG_OK);
    const char *names[] = {"fc1", "relu1", "fc2", "relu2", "fc3"};
    assert_int_equal(m.n_layers, 5);
    for (int l = 0; l < 5; l++) assert_string_equal(m.layers[l].name, names[l]);
    assert_string_equal(m.tensors[5].name, "fc3.bias");
    assert_true(m.n_params == 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);

    // Initialization: Kaiming-normal weights (std sqrt(2/in)), zero biases.
    assert_int_equal(model_build_mlp(&m, "784-1024-10", "relu", &err), FG_OK);
    float *p = fg_alloc_floats(m.n_params);
    for (size_t i = 0; i < m.n_params; i++) p[i] = 1.0f;
    model_init_params(&m, p, 1);
    size_t nw = (size_t)784 * 1024;
    double var = dot(p, p, nw) / (double)nw;
    assert_true(fabs(var / (2.0 / 784) - 1.0) < 0.01);  // 800k samples: ~0.16% standard error
    for (int i = 0; i < 1024; i++) assert_true(p[nw + i] == 0.0f);
    fg_free(p);
}

// boundaries=auto minimises the largest stage's cost: parameter counts by default, or the given
// per-layer costs; stages start at linear layers; explicit boundaries are checked.
static void test_partition(void **state) {
    (void)state;
    Model m;
    FgError err = {0};
    int first[5];
    // fc1 relu1 fc2 relu2 fc3 relu3 fc4 relu4 fc5 (layers 0..8)
    assert_int_equal(model_build_mlp(&m, "100-100-100-100-100-10", "relu", &err), FG_OK);
    assert_int_equal(partition_layers(&m, 2, "auto", NULL, first, &err), FG_OK);
    assert_true(first[0] == 0 && first[1] == 4 && first[2] == 9);  // 20200 | 20200 + 1010
    // A costly head moves the cut: fc1..fc3 | fc4..fc5.
    double cost[9] = {1, 0, 1, 0, 1, 0, 1, 0, 3};
    assert_int_equal(partition_layers(&m, 2, "auto", cost, first, &err), FG_OK);
    assert_true(first[1] == 6);
    assert_int_equal(partition_layers(&m, 3, "auto", cost, first, &err), FG_OK);
    assert_true(first[1] == 4 && first[2] == 8 && first[3] == 9);  // 2 | 2 | 3: the head alone
    for (int l = 0; l < 9; l++) cost[l] = l % 2 ? 100 : 1;  // costly activations stay with their layer
    assert_int_equal(partition_layers(&m, 4, "auto", cost, first, &err), FG_OK);
    for (int s = 0; s < 4; s++) assert_int_equal(m.layers[first[s]].kind, LAYER_LINEAR);
    assert_int_equal(partition_layers(&m, 3, "2,6", NULL, first, &err), FG_OK);
    assert_true(first[1] == 2 && first[2] == 6 && first[3] == 9);
    assert_int_equal(partition_layers(&m, 3, "6,2", NULL, first, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "increasing"));
    assert_int_equal(partition_layers(&m, 6, "auto", NULL, first, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "linear layer"));
}

// Op F's reference dots (taken while a layer's tangents are in memory) are the dots of the
// regenerated tangents, per layer; a guide replaces tangent 0 in the output tangent and its dot.
static void test_forward_reference_dots(void **state) {
    (void)state;
    enum { K = 2 };
    Net n;
    net_make(&n, "gelu");
    int L = n.m.n_layers;
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &n.m, 0, L, ROWS, K, NULL), FG_OK);
    float *ref = fg_alloc_floats(n.m.n_params), *y = fg_alloc_floats(ROWS * 6);
    float *ydot = fg_alloc_floats((size_t)K * ROWS * 6), *ydot_guided = fg_alloc_floats((size_t)K * ROWS * 6);
    Rng r = {7};
    for (size_t i = 0; i < n.m.n_params; i++) ref[i] = rng_uniform(&r);
    double by_layer[8 * K] = {0};
    assert_true(L <= 8);
    stage_tangent_dots_by_layer(&st, key_at(5), 1, ref, by_layer);
    for (int l = 0; l < L; l++) {
        const Layer *Ly = &n.m.layers[l];
        if (!Ly->param_count) continue;
        const float *p = n.params + Ly->param_offset, *lref = ref + Ly->param_offset;
        double dots[K] = {0}, guided_dots[K] = {0};
        ParamTangents t = {.key = key_at(5), .ref = lref, .ref_dots = dots};
        stage_layer_forward(&st, l, p, NULL, &t, NULL, n.x, NULL, y, ydot, ROWS);
        for (int k = 0; k < K; k++)
            assert_true(fabs(dots[k] - by_layer[l * K + k]) <= 1e-12 * (1.0 + fabs(dots[k])));
        // Guided: tangent 0 is the reference itself, tangent 1 unchanged.
        ParamTangents g = {.key = key_at(5), .guide = lref, .ref = lref, .ref_dots = guided_dots};
        stage_layer_forward(&st, l, p, NULL, &g, NULL, n.x, NULL, y, ydot_guided, ROWS);
        double norm2 = 0.0;
        for (size_t i = 0; i < Ly->param_count; i++) norm2 += (double)lref[i] * lref[i];
        assert_true(fabs(guided_dots[0] - norm2) <= 1e-9 * norm2);
        assert_true(guided_dots[1] == dots[1]);
        size_t per_k = (size_t)ROWS * Ly->out;
        assert_memory_equal(ydot + per_k, ydot_guided + per_k, per_k * sizeof(float));
        assert_memory_not_equal(ydot, ydot_guided, per_k * sizeof(float));
    }
    fg_free(ref), fg_free(y), fg_free(ydot), fg_free(ydot_guided), fg_free(n.params);
    stage_free(&st);
}

// Timed op costs are positive and finite, U only with tangents or an optimizer (then on the
// layers with parameters); every layer is timed.
static void test_measure_costs(void **state) {
    (void)state;
    Model m;
    FgError err = {0};
    assert_int_equal(model_build_mlp(&m, "64-128-10", "relu", &err), FG_OK);
    OptimizerConfig adam = {.kind = OPT_ADAM, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    for (int K = 0; K <= 1; K++)
        for (int opt = 0; opt <= 1; opt++) {
            double cost[3 * N_OP_COSTS];
            CostSetup setup = {.rows = 8, .with_ref = K, .n_mb = 4, .seed = 1, .optimizer = opt ? &adam : NULL};
            assert_int_equal(model_measure_layer_costs(&backend_cpu, &m, K, &setup, cost, &err), FG_OK);
            for (int l = 0; l < 3; l++)
                for (int i = 0; i < N_OP_COSTS; i++) {
                    double c = cost[l * N_OP_COSTS + i];
                    assert_true(isfinite(c) && c >= 0);
                    if (i == COST_U) assert_true(K || opt ? c >= 0 : c == 0);
                    else if (l != 1 && i != COST_ZERO) assert_true(c > 0);
                }
            if (opt) assert_true(cost[COST_U] > 0 && cost[2 * N_OP_COSTS + COST_U] > 0);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backprop_matches_finite_differences),
        cmocka_unit_test(test_forward_gradient_is_unbiased),
        cmocka_unit_test(test_batched_tangents_match_single),
        cmocka_unit_test(test_stage_split_is_exact),
        cmocka_unit_test(test_stage_split_is_exact_bf16),
        cmocka_unit_test(test_model_build),
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_measure_costs),
        cmocka_unit_test(test_forward_reference_dots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
