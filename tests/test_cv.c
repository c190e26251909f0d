// The corrected estimators of DESIGN.md section 4 are unbiased for the true batch gradient:
// control variate (cv) with a fresh or a stale c, the lag-0 form used by the pipeline (the
// selected micro-batches contribute their exact gradient) and guided; cv reduces the variance
// by the predicted factor.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "estimator.h"
#include "layer.h"
#include "model.h"
#include "stage.h"
#include "tangent.h"

enum { N = 4, ROWS = 4, IN = 6, C = 3, T = 4000, SEED = 7 };

typedef struct {
    Model m;
    size_t dim;
    float *params;
    float x[N][ROWS * IN];
    unsigned char labels[N][ROWS];
    float *g[N];    // exact gradient of each micro-batch's mean loss
    float *g_true;  // their mean: what every estimator must average to
} Problem;

static uint64_t lcg = 12345;
static float uniform(void) {  // [-1, 1)
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(lcg >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static double dist2(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}

static void gradient(Problem *p, const float *params, int b, float *g) {
    Stage st;
    assert_int_equal(stage_init(&st, &p->m, 0, p->m.n_layers, ROWS, 0, NULL), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, ROWS)), dz[ROWS * C];
    const float *y;
    stage_forward(&st, params, NULL, p->x[b], NULL, ROWS, stash, &y, NULL);
    loss_backward(y, p->labels[b], ROWS, C, dz);
    memset(g, 0, p->dim * sizeof(float));
    stage_backward(&st, params, stash, dz, NULL, g, ROWS);
    fg_free(stash);
    stage_free(&st);
}

static void problem_make(Problem *p) {
    FgError err = {0};
    assert_int_equal(model_build_mlp(&p->m, "6-8-5-3", "gelu", &err), FG_OK);
    p->dim = p->m.n_params;
    p->params = fg_alloc_floats(p->dim);
    model_init_params(&p->m, p->params, SEED);
    // Micro-batches from one distribution (shared pattern plus noise), as in training: their
    // gradients are correlated, which is what makes an exact gradient a good control variate.
    float shared[ROWS * IN];
    for (int i = 0; i < ROWS * IN; i++) shared[i] = 1.5f * uniform();
    for (int b = 0; b < N; b++) {
        for (int i = 0; i < ROWS * IN; i++) p->x[b][i] = shared[i] + 0.3f * uniform();
        for (int r = 0; r < ROWS; r++) p->labels[b][r] = (unsigned char)(r % C);
    }
    p->g_true = fg_alloc_floats(p->dim);
    for (int b = 0; b < N; b++) {
        p->g[b] = fg_alloc_floats(p->dim);
        gradient(p, p->params, b, p->g[b]);
        for (size_t i = 0; i < p->dim; i++) p->g_true[i] += p->g[b][i] / N;
    }
}

static void problem_free(Problem *p) {
    for (int b = 0; b < N; b++) fg_free(p->g[b]);
    fg_free(p->g_true), fg_free(p->params);
}

typedef struct {
    double err2;  // |mean of the T estimates - g_true|^2
    double var;   // mean over draws of |estimate - g_true|^2
} Draws;

// T estimates of kind `kind` with reference vector r (c, or the guide for EST_GUIDED; NULL for
// fg); zero_selected zeroes the coefficients of micro-batches < n_sel (the lag-0 form).
static Draws draw(Problem *p, EstimatorKind kind, int K, const float *r, int zero_selected,
                  int n_sel) {
    Stage st;
    assert_int_equal(stage_init(&st, &p->m, 0, p->m.n_layers, ROWS, K, NULL), FG_OK);
    if (kind == EST_GUIDED) st.guide = r;
    float *mean = fg_alloc_floats(p->dim), *est = fg_alloc_floats(p->dim);
    float d[N * 4], coeff[N * 4], base;
    double rdots[N * 4], var = 0;
    Estimator e = {kind, N, K};
    for (uint32_t t = 0; t < T; t++) {
        TangentKey key = {.seed = SEED, .stream = STREAM_TANGENT, .step = t};
        for (int b = 0; b < N; b++) {
            const float *y, *ydot;
            key.microbatch = (uint32_t)b;
            stage_forward(&st, p->params, &key, p->x[b], NULL, ROWS, NULL, &y, &ydot);
            loss_jvp(y, ydot, p->labels[b], ROWS, C, K, d + b * K);
        }
        key.microbatch = 0;
        if (r) stage_tangent_dots(&st, key, N, r, rdots);
        assert_int_equal(estimator_coefficients(&e, d, r ? rdots : NULL, coeff, &base), 0);
        if (zero_selected)
            for (int i = 0; i < n_sel * K; i++) coeff[i] = 0.0f;
        for (size_t i = 0; i < p->dim; i++) est[i] = r ? base * r[i] : 0.0f;
        stage_add_tangents(&st, key, N, coeff, est);
        var += dist2(est, p->g_true, p->dim) / T;
        for (size_t i = 0; i < p->dim; i++) mean[i] += est[i] / T;
    }
    Draws out = {dist2(mean, p->g_true, p->dim), var};
    fg_free(mean), fg_free(est);
    stage_free(&st);
    return out;
}

// The mean of T independent draws of an unbiased estimator with per-draw variance V has
// E|mean - g|^2 = V / T; a sum over many coordinates concentrates, so a factor 4 either way
// separates unbiased from biased (or from draws that are not independent).
static void assert_unbiased(const char *what, Draws d) {
    printf("# %s: |mean - g|^2 = %.3g, variance / T = %.3g\n", what, d.err2, d.var / T);
    if (!(d.err2 <= 4 * d.var / T && d.err2 >= d.var / (4.0 * T)))
        fail_msg("%s: |mean - g|^2 = %g is not within 4x of variance/T = %g", what, d.err2, d.var / T);
}

static void mean_of(Problem *p, int first, int count, float *out) {
    memset(out, 0, p->dim * sizeof(float));
    for (int b = first; b < first + count; b++)
        for (size_t i = 0; i < p->dim; i++) out[i] += p->g[b][i] / count;
}

static void test_cv_unbiased_and_reduces_variance(void **state) {
    (void)state;
    Problem p;
    problem_make(&p);
    float *c = fg_alloc_floats(p.dim);
    mean_of(&p, 0, 2, c);  // S = {0, 1}
    Draws fg = draw(&p, EST_FG, 1, NULL, 0, 0), cv = draw(&p, EST_CV, 1, c, 0, 0);
    assert_unbiased("fg", fg);
    assert_unbiased("cv", cv);
    // Per draw, cv's error is (1/N) sum_b [((g_b - c).v_b) v_b - (g_b - c)], with variance
    // (dim + 1) sum_b |g_b - c|^2 / N^2; fg's is the same with c = 0.
    double pred_cv = 0, pred_fg = 0;
    for (int b = 0; b < N; b++) {
        pred_cv += (double)(p.dim + 1) * dist2(p.g[b], c, p.dim) / (N * N);
        pred_fg += (double)(p.dim + 1) * dot(p.g[b], p.g[b], p.dim) / (N * N);
    }
    pred_fg -= dot(p.g_true, p.g_true, p.dim);  // fg's error is centred on g_true, not 0
    printf("# variance: fg %.4g (predicted %.4g), cv %.4g (predicted %.4g), reduction %.2f\n",
           fg.var, pred_fg, cv.var, pred_cv, fg.var / cv.var);
    assert_true(fabs(cv.var / pred_cv - 1) < 0.15);
    assert_true(fabs(fg.var / pred_fg - 1) < 0.15);
    assert_true(fg.var / cv.var > 2.0);  // correlated micro-batches: c is a good control variate
    fg_free(c);
    problem_free(&p);
}

static void test_cv_unbiased_with_stale_c(void **state) {
    (void)state;
    Problem p;
    problem_make(&p);
    // c from the previous weights (lag 1): any c independent of the tangents keeps cv unbiased.
    float *stale = fg_alloc_floats(p.dim), *prev = fg_alloc_floats(p.dim), *g0 = fg_alloc_floats(p.dim);
    for (size_t i = 0; i < p.dim; i++) prev[i] = p.params[i] + 0.05f * uniform();
    for (int b = 2; b < 4; b++) {
        gradient(&p, prev, b, g0);
        for (size_t i = 0; i < p.dim; i++) stale[i] += g0[i] / 2;
    }
    assert_unbiased("cv, stale c", draw(&p, EST_CV, 1, stale, 0, 0));
    fg_free(stale), fg_free(prev), fg_free(g0);
    problem_free(&p);
}

static void test_lag0_form_unbiased(void **state) {
    (void)state;
    Problem p;
    problem_make(&p);
    // The pipeline's lag-0 form: c = mean exact gradient of S = {0, 1}, whose coefficients are
    // zero; E[g] = c + (1/N) sum_{b not in S} (g_b - c) = (1/N) sum_b g_b.
    float *c = fg_alloc_floats(p.dim);
    mean_of(&p, 0, 2, c);
    assert_unbiased("cv lag 0", draw(&p, EST_CV, 1, c, 1, 2));
    fg_free(c);
    problem_free(&p);
}

static void test_guided_unbiased(void **state) {
    (void)state;
    Problem p;
    problem_make(&p);
    // u: a unit direction from an exact gradient of other data; with K >= 2 the random
    // tangents estimate the part of the gradient orthogonal to u, so g stays unbiased.
    float *u = fg_alloc_floats(p.dim);
    mean_of(&p, 1, 2, u);
    double n = sqrt(dot(u, u, p.dim));
    for (size_t i = 0; i < p.dim; i++) u[i] = (float)(u[i] / n);
    Draws guided = draw(&p, EST_GUIDED, 3, u, 0, 0), fg = draw(&p, EST_FG, 2, NULL, 0, 0);
    assert_unbiased("guided K=3", guided);
    printf("# variance: guided K=3 %.4g, fg K=2 %.4g\n", guided.var, fg.var);
    assert_true(guided.var < fg.var);  // same number of random tangents, plus the exact u part
    fg_free(u);
    problem_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cv_unbiased_and_reduces_variance),
        cmocka_unit_test(test_cv_unbiased_with_stale_c),
        cmocka_unit_test(test_lag0_form_unbiased),
        cmocka_unit_test(test_guided_unbiased),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
