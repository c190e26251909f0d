// Local losses (local_loss.h, perturb_local.c) on a "6-8-3" MLP whose hidden layer (fc1 and a
// ReLU or a GELU) ends in G = 2 fixed heads of S = 4 units each:
//   1. op F's d of a row and group is the derivative of that group's loss when the layer's
//      output h moves along the tangent (central differences);
//   2. fc1's estimate from the heads' d's is unbiased for the gradient of the summed local
//      losses (mean over the rows) and its per-draw variance is
//        V = 1/(B^2 K) sum_r |x~_r|^2 sum_g (S_{r,g} + 1) |a_{r,g}|^2,
//      a_{r,g} = the group's loss gradient at fc1's output, x~ = (x, 1), S_{r,g} the group's
//      units that the ReLU lets through (the others' tangents drop out: their gradient is 0;
//      GELU: all S);
//   3. a G that does not divide a hidden width is refused.
// (That the tangent stops at the heads is pipeline_equivalence.sh's: 1, 2 and 4 stages agree.)
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activation_math.h"
#include "common.h"
#include "local_loss.h"
#include "loss_math.h"
#include "model.h"
#include "stage.h"
#include "tangent.h"
#include "test_util.h"

enum { ROWS = 4, IN = 6, WIDTH = 8, G = 2, S = WIDTH / G, C = 3, KMAX = 2, SEED = 5, T = 4000 };

// The loss of one row summed over its groups (local_loss_jvp without tangents).
static double row_loss(const float *head, const float *h, Label label) {
    float work[WIDTH];
    return local_loss_jvp(head, h, NULL, &label, 1, WIDTH, G, C, 0, work, NULL);
}

static void test_jvp_against_differences(void **state) {
    (void)state;
    float head[WIDTH * C], h[ROWS * WIDTH], hdot[KMAX * ROWS * WIDTH], work[WIDTH];
    float d[KMAX * ROWS * G];
    Label labels[ROWS] = {0, 2, 1, 2};
    Rng r = {SEED};
    local_heads_fill(SEED, 1, WIDTH, G, C, head);
    fill_uniform(&r, h, ROWS * WIDTH, 1.0f);
    fill_uniform(&r, hdot, KMAX * ROWS * WIDTH, 1.0f);
    local_loss_jvp(head, h, hdot, labels, ROWS, WIDTH, G, C, KMAX, work, d);
    const float eps = 1e-2f;
    for (int k = 0; k < KMAX; k++)
        for (int row = 0; row < ROWS; row++)
            for (int g = 0; g < G; g++) {
                float plus[WIDTH], minus[WIDTH];
                memcpy(plus, h + row * WIDTH, sizeof plus);
                memcpy(minus, h + row * WIDTH, sizeof minus);
                for (int j = g * S; j < (g + 1) * S; j++) {  // only group g moves
                    plus[j] += eps * hdot[(k * ROWS + row) * WIDTH + j];
                    minus[j] -= eps * hdot[(k * ROWS + row) * WIDTH + j];
                }
                double want = (row_loss(head, plus, labels[row]) - row_loss(head, minus, labels[row])) / (2 * eps);
                double got = d[(k * ROWS + row) * G + g];
                if (!(fabs(got - want) <= 2e-3 * (1.0 + fabs(want))))
                    fail_msg("d of tangent %d, row %d, group %d: %.6g, differences %.6g", k, row, g,
                             got, want);
            }
}

typedef struct {
    Model m;
    float *params;
    float x[ROWS * IN];
    Label labels[ROWS];
    float head[WIDTH * C];
    float g_true[WIDTH * IN + WIDTH];  // fc1's gradient of the mean summed local loss
    double pred1;                      // V for K = 1
} Problem;

// The exact gradient, by hand: a = H_g (softmax - onehot) * f'(z) per row and group.
static void problem_make(Problem *p, int relu) {
    FgError err = {0};
    assert_int_equal(model_build_mlp(&p->m, "6-8-3", relu ? "relu" : "gelu", &err), FG_OK);
    p->params = fg_alloc_floats(p->m.n_params);
    model_init_params(&p->m, p->params, SEED);
    Rng r = {SEED};
    fill_uniform(&r, p->x, ROWS * IN, 1.5f);
    for (int i = 0; i < ROWS; i++) p->labels[i] = (Label)rng_int(&r, 0, C - 1);
    local_heads_fill(SEED, 1, WIDTH, G, C, p->head);
    const float *W = p->params, *b = p->params + WIDTH * IN;
    for (int row = 0; row < ROWS; row++) {
        const float *x = p->x + row * IN;
        float z[WIDTH], h[WIDTH], a[WIDTH];
        for (int j = 0; j < WIDTH; j++) {
            z[j] = b[j] + (float)dot(W + j * IN, x, IN);
            h[j] = relu ? fg_relu(z[j]) : fg_gelu(z[j]);
        }
        for (int g = 0; g < G; g++) {
            float logits[C], e[C];
            for (int c = 0; c < C; c++) {
                logits[c] = 0;
                for (int j = g * S; j < (g + 1) * S; j++) logits[c] += h[j] * p->head[j * C + c];
            }
            SoftmaxRow s = fg_softmax_row(logits, C);
            for (int c = 0; c < C; c++) e[c] = fg_xent_grad(s, logits, p->labels[row], c);
            for (int j = g * S; j < (g + 1) * S; j++)
                a[j] = (relu ? fg_relu_grad(z[j]) : fg_gelu_grad(z[j])) * (float)dot(p->head + j * C, e, C);
        }
        for (int j = 0; j < WIDTH; j++) {
            for (int i = 0; i < IN; i++) p->g_true[j * IN + i] += a[j] * x[i] / ROWS;
            p->g_true[WIDTH * IN + j] += a[j] / ROWS;
        }
        for (int g = 0; g < G; g++) {
            double a2 = 0;
            int active = 0;
            for (int j = g * S; j < (g + 1) * S; j++)
                a2 += (double)a[j] * a[j], active += !relu || z[j] > 0;
            p->pred1 += (dot(x, x, IN) + 1.0) * (active + 1) * a2;
        }
    }
    p->pred1 /= (double)ROWS * ROWS;
}

// T draws of fc1's estimate with K tangents: |mean - g|^2, the per-draw variance and its se.
static void draws(const Problem *p, int K, double *err2, double *var, double *var_se) {
    Stage st;
    FgError err = {0};
    assert_int_equal(stage_init(&st, &backend_cpu, &p->m, 0, p->m.n_layers, ROWS, K, NULL), FG_OK);
    st.perturb = PERTURB_ACTIVITY;
    assert_int_equal(stage_set_local_groups(&st, G, SEED, &err), FG_OK);
    assert_true(stage_local_head(&st, 1) && !stage_local_head(&st, 2));
    assert_memory_equal(st.local_head[1], p->head, sizeof p->head);
    enum { DIM = WIDTH * IN + WIDTH };
    float z[ROWS * WIDTH], zdot[KMAX * ROWS * WIDTH], h[ROWS * WIDTH], hdot[KMAX * ROWS * WIDTH];
    float out_grad[ROWS * WIDTH], est[DIM], mean[DIM];
    double sum[DIM] = {0}, s1 = 0, s2 = 0;
    for (uint32_t t = 0; t < T; t++) {
        ParamTangents tangents = {.key = tangent_key(SEED, t, 0, 0)};
        stage_layer_forward(&st, 0, p->params, NULL, &tangents, NULL, p->x, NULL, z, zdot, ROWS);
        stage_layer_forward(&st, 1, NULL, NULL, &tangents, NULL, z, zdot, h, hdot, ROWS);
        stage_local_output_grad(&st, 1, h, hdot, zdot, p->labels, ROWS, 1.0f / (ROWS * K), out_grad);
        memset(est, 0, sizeof est);
        stage_local_weight_grad(&st, 0, ROWS, p->x, out_grad, est);
        double e2 = dist2(est, p->g_true, DIM);
        s1 += e2, s2 += e2 * e2;
        for (int i = 0; i < DIM; i++) sum[i] += est[i];
    }
    for (int i = 0; i < DIM; i++) mean[i] = (float)(sum[i] / T);
    *err2 = dist2(mean, p->g_true, DIM);
    *var = s1 / T;
    *var_se = sqrt(fmax(s2 / T - *var * *var, 0.0) / T);
    stage_free(&st);
}

static void unbiased_with_formula_variance(int relu) {
    Problem p = {0};
    problem_make(&p, relu);
    for (int K = 1; K <= KMAX; K++) {
        double err2, var, se, pred = p.pred1 / K;
        draws(&p, K, &err2, &var, &se);
        printf("# local %s G=%d K=%d  |mean - g|^2 = %.4g  var/T = %.4g  var = %.4g +- %.2g  "
               "predicted %.4g (ratio %.3f)\n", relu ? "relu" : "gelu", G, K, err2, var / T, var, se, pred, var / pred);
        char name[32];
        snprintf(name, sizeof name, "local %s K=%d", relu ? "relu" : "gelu", K);
        assert_draws_match(name, err2, var, se, pred, T);
    }
    fg_free(p.params);
}

static void test_unbiased_relu(void **state) {
    (void)state;
    unbiased_with_formula_variance(1);
}

static void test_unbiased_gelu(void **state) {
    (void)state;
    unbiased_with_formula_variance(0);
}

// A G that does not divide a hidden width is refused by name.
static void test_groups_must_divide_widths(void **state) {
    (void)state;
    Model m;
    Stage st;
    FgError err = {0};
    assert_int_equal(model_build_mlp(&m, "6-8-3", "relu", &err), FG_OK);
    assert_int_equal(stage_init(&st, &backend_cpu, &m, 0, m.n_layers, ROWS, 1, NULL), FG_OK);
    assert_int_equal(stage_set_local_groups(&st, 3, SEED, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "does not divide the 8 outputs of layer fc1"));
    stage_free(&st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jvp_against_differences),
        cmocka_unit_test(test_unbiased_relu),
        cmocka_unit_test(test_unbiased_gelu),
        cmocka_unit_test(test_groups_must_divide_widths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
