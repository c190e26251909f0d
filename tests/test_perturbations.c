// The perturbations of docs/design.md section 4 through the Stage API, on a small "6-5-4-3"
// MLP with N micro-batches.
// Activity perturbation:
//   1. op F's output tangent is the derivative of the output when every linear layer's output
//      z_l is moved to z_l + eps u_l (central differences);
//   2. the per-sample directional derivatives d_i satisfy d_i = sum_l delta_{l,i} . u_{l,i}
//      with delta the backprop adjoints of sample i's own loss;
//   3. the estimate is unbiased for the batch gradient and its per-draw variance is
//        V = 1/((N B)^2 K) sum_i sum_l |x~_{l,i}|^2 (out_l |a_i|^2 + |a_{l,i}|^2),
//      a_i = (delta_{l,i})_l over every linear layer, x~ = (x, 1): the layer input with the bias.
// Low-rank weight tangents (rank r):
//   4. op F's output tangent equals the JVP along the tangent formed explicitly from its factors,
//      and d_b = grad l_b . v (the dots of the regenerated tangents);
//   5. the fg estimate is unbiased and its per-draw variance is
//        V = 1/N^2 sum_b (E[(g_b.v)^2 |v|^2] - |g_b|^2), with E[(g.v)^2 |v|^2] summed over blocks
//      (a layer's weights W, its bias b): sum_blocks T + sum_{blocks i != j} |g_i|^2 n_j, where a
//      Gaussian block of n values has T = (n + 2)|g|^2 and a rank-r weight block [out, in] has
//      T = ((out + 2)(in + 2) + (r - 1)(out in + 2)) |G|^2 / r;
//   6. on the GPT's layers (a sequence, the branch inside a wider token row), 4 holds for every
//      linear, and LayerNorm and the embedding keep full tangents.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "layer.h"
#include "linear_shape.h"
#include "model.h"
#include "stage.h"
#include "tangent.h"
#include "test_util.h"

enum { N = 3, ROWS = 4, IN = 6, C = 3, KMAX = 2, SEED = 77, T = 4000 };
#define WIDTHS "6-5-4-3"

typedef struct {
    Model m;
    size_t dim;
    float *params;
    float x[N][ROWS * IN];
    Label labels[N][ROWS];
    float *g[N];    // gradient of micro-batch b's mean loss (backprop)
    float *g_true;  // gradient of the mean loss over the N * ROWS samples
    double pred1;   // V for K = 1 (header)
} Problem;

// Layer l's output adjoint of every row of micro-batch b, each of its own row's loss (not the
// mean's), into delta (stage_adjoint_offset layout); inputs into stash; the gradient into g.
static void backprop(const Problem *p, int b, float *stash, float *delta, float *g) {
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &p->m, 0, p->m.n_layers, ROWS, 0, NULL), FG_OK);
    const float *y;
    float dz[ROWS * C];
    stage_forward(&st, p->params, NULL, p->x[b], NULL, ROWS, stash, &y, NULL);
    loss_backward(y, p->labels[b], ROWS, logit_rows(C), dz);
    stage_backward_input(&st, p->params, stash, dz, NULL, delta, ROWS);
    stage_backward_weight(&st, NULL, stash, delta, g, ROWS);
    for (size_t i = 0; i < stage_adjoint_floats(&st, ROWS); i++) delta[i] *= ROWS;
    stage_free(&st);
}

static void problem_make(Problem *p) {
    FgError err = {0};
    assert_int_equal(model_build_mlp(&p->m, WIDTHS, "gelu", &err), FG_OK);
    p->dim = p->m.n_params;
    p->params = fg_alloc_floats(p->dim);
    model_init_params(&p->m, p->params, SEED);
    Rng r = {SEED};
    for (int b = 0; b < N; b++) {
        fill_uniform(&r, p->x[b], ROWS * IN, 1.5f);
        for (int i = 0; i < ROWS; i++) p->labels[b][i] = (Label)rng_int(&r, 0, C - 1);
    }
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &p->m, 0, p->m.n_layers, ROWS, 0, NULL), FG_OK);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, ROWS));
    float *delta = fg_alloc_floats(stage_adjoint_floats(&st, ROWS));
    p->g_true = fg_alloc_floats(p->dim);
    for (int b = 0; b < N; b++) {
        float *g = p->g[b] = fg_alloc_floats(p->dim);
        backprop(p, b, stash, delta, g);
        for (size_t i = 0; i < p->dim; i++) p->g_true[i] += g[i] / N;
        for (int i = 0; i < ROWS; i++) {
            double a2 = 0, sum = 0;
            for (int l = 0; l < p->m.n_layers; l++) {
                const Layer *L = &p->m.layers[l];
                if (!L->param_count) continue;
                const float *al = delta + stage_adjoint_offset(&st, l, ROWS) + (size_t)i * L->out;
                a2 += dot(al, al, L->out);
            }
            for (int l = 0; l < p->m.n_layers; l++) {
                const Layer *L = &p->m.layers[l];
                if (!L->param_count) continue;
                const float *al = delta + stage_adjoint_offset(&st, l, ROWS) + (size_t)i * L->out;
                const float *xl = stash + stage_stash_offset(&st, l, ROWS) + (size_t)i * L->in;
                sum += (dot(xl, xl, L->in) + 1.0) * (L->out * a2 + dot(al, al, L->out));
            }
            p->pred1 += sum;
        }
    }
    p->pred1 /= (double)(N * ROWS) * (N * ROWS);
    fg_free(stash), fg_free(delta);
    stage_free(&st);
}

static void problem_free(Problem *p) {
    for (int b = 0; b < N; b++) fg_free(p->g[b]);
    fg_free(p->g_true), fg_free(p->params);
}

// ---------------------------------------------------------------------------------------------
// 1. The output tangent against central differences of the perturbed forward pass.

typedef struct {
    const Problem *p;
    TangentKey key;
    int K, k, out;  // which tangent and which output element the difference is of
    float eps;
} Perturbed;

// Output element `out` with every linear layer's output moved by eps * u_{l,k}.
static double perturbed_output(void *ctx) {
    const Perturbed *q = ctx;
    const Model *m = &q->p->m;
    float a[ROWS * 8], b[ROWS * 8], u[ROWS * 8];
    memcpy(a, q->p->x[0], sizeof(float) * ROWS * IN);
    for (int l = 0; l < m->n_layers; l++) {
        const Layer *L = &m->layers[l];
        layer_ops(L)->forward(L, q->p->params + L->param_offset, a, b, ROWS);
        if (L->param_count) {
            TangentKey k = q->key;
            k.layer = (uint32_t)l, k.k = (uint32_t)q->k, k.stream = STREAM_ACTIVITY;
            tangent_fill(k, 0, (size_t)ROWS * L->out, u);
            for (int i = 0; i < ROWS * L->out; i++) b[i] += q->eps * u[i];
        }
        memcpy(a, b, sizeof(float) * ROWS * L->out);
    }
    return a[q->out];
}

static void test_jvp_against_differences(void **state) {
    (void)state;
    Problem p = {0};
    problem_make(&p);
    for (int K = 1; K <= KMAX; K++) {
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &p.m, 0, p.m.n_layers, ROWS, K, NULL), FG_OK);
        st.perturb = PERTURB_ACTIVITY;
        TangentKey key = tangent_key(SEED, 3, 1, 0);
        const float *y, *ydot;
        stage_forward(&st, p.params, &key, p.x[0], NULL, ROWS, NULL, &y, &ydot);
        for (int k = 0; k < K; k++)
            for (int o = 0; o < ROWS * C; o++) {
                Perturbed q = {&p, key, K, k, o, 1e-2f};
                double up = perturbed_output(&q);
                q.eps = -1e-2f;
                double down = perturbed_output(&q);
                double diff = (up - down) / 2e-2;
                double jvp = ydot[(size_t)k * ROWS * C + o];
                if (!(fabs(diff - jvp) <= 2e-3 * (1.0 + fabs(jvp))))
                    fail_msg("K %d tangent %d output %d: jvp %.6g, central difference %.6g", K, k,
                             o, jvp, diff);
            }
        stage_free(&st);
    }
    problem_free(&p);
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. d per sample, and the estimate's mean and variance over T draws.

// d_i = sum_l delta_{l,i} . u_{l,i}: op F's per-sample derivatives against backprop's adjoints
// of each sample's own loss, for micro-batch b along the activity tangents of key.
static void check_d(const Problem *p, int b, TangentKey key, int K, const float *d) {
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &p->m, 0, p->m.n_layers, ROWS, 0, NULL), FG_OK);
    float *delta = fg_alloc_floats(stage_adjoint_floats(&st, ROWS)), *g = fg_alloc_floats(p->dim);
    float *stash = fg_alloc_floats(stage_stash_floats(&st, ROWS)), u[ROWS * 8];
    backprop(p, b, stash, delta, g);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < ROWS; i++) {
            double want = 0;
            for (int l = 0; l < p->m.n_layers; l++) {
                const Layer *L = &p->m.layers[l];
                if (!L->param_count) continue;
                TangentKey lk = key;
                lk.layer = (uint32_t)l, lk.k = (uint32_t)k, lk.stream = STREAM_ACTIVITY;
                tangent_fill(lk, 0, (size_t)ROWS * L->out, u);
                want += dot(delta + stage_adjoint_offset(&st, l, ROWS) + (size_t)i * L->out,
                            u + (size_t)i * L->out, L->out);
            }
            if (!(fabs(d[k * ROWS + i] - want) <= 1e-4 * (1.0 + fabs(want))))
                fail_msg("d of row %d, tangent %d: %.7g, adjoints . u = %.7g", i, k,
                         d[k * ROWS + i], want);
        }
    fg_free(delta), fg_free(g), fg_free(stash);
    stage_free(&st);
}

static void draws(const Problem *p, int K, double *err2, double *var, double *var_se) {
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, &p->m, 0, p->m.n_layers, ROWS, K, NULL), FG_OK);
    st.perturb = PERTURB_ACTIVITY;
    size_t dim = p->dim;
    float *stash = fg_alloc_floats(stage_stash_floats(&st, ROWS));
    float *work = fg_alloc_floats((size_t)ROWS * 8);
    float *est = fg_alloc_floats(dim), *mean_sum = fg_alloc_floats(dim);
    double *sum = calloc(dim, sizeof(double)), s1 = 0, s2 = 0;
    float d[KMAX * ROWS], coeff[KMAX * ROWS];
    for (uint32_t t = 0; t < T; t++) {
        memset(est, 0, dim * sizeof(float));
        for (int b = 0; b < N; b++) {
            TangentKey key = tangent_key(SEED, t, b, 0);
            const float *y, *ydot;
            stage_forward(&st, p->params, &key, p->x[b], NULL, ROWS, stash, &y, &ydot);
            loss_jvp_rows(y, ydot, p->labels[b], ROWS, logit_rows(C), K, d);
            if (t < 4) check_d(p, b, key, K, d);
            for (int i = 0; i < K * ROWS; i++) coeff[i] = d[i] / (float)(N * ROWS * K);
            for (int l = 0; l < p->m.n_layers; l++) {
                const Layer *L = &p->m.layers[l];
                if (!L->param_count) continue;
                stage_layer_activity_estimate(&st, l, key, 1, ROWS, coeff,
                                              stash + stage_stash_offset(&st, l, ROWS), work,
                                              est + L->param_offset);
            }
        }
        double e2 = dist2(est, p->g_true, dim);
        s1 += e2, s2 += e2 * e2;
        for (size_t i = 0; i < dim; i++) sum[i] += est[i];
    }
    for (size_t i = 0; i < dim; i++) mean_sum[i] = (float)(sum[i] / T);
    *err2 = dist2(mean_sum, p->g_true, dim);
    *var = s1 / T;
    *var_se = sqrt(fmax(s2 / T - *var * *var, 0.0) / T);
    free(sum);
    fg_free(stash), fg_free(work), fg_free(est), fg_free(mean_sum);
    stage_free(&st);
}

static void test_unbiased_with_formula_variance(void **state) {
    (void)state;
    Problem p = {0};
    problem_make(&p);
    for (int K = 1; K <= KMAX; K++) {
        double err2, var, se, pred = p.pred1 / K;
        draws(&p, K, &err2, &var, &se);
        printf("# activity K=%d  |mean - g|^2 = %.4g  var/T = %.4g  var = %.4g +- %.2g  "
               "predicted %.4g (ratio %.3f)\n", K, err2, var / T, var, se, pred, var / pred);
        char name[32];
        snprintf(name, sizeof name, "activity K=%d", K);
        assert_draws_match(name, err2, var, se, pred, T);
    }
    problem_free(&p);
}

// ---------------------------------------------------------------------------------------------
// 4 and 5. Low-rank weight tangents.

// Tangent (key's micro-batch and k) of linear layer L formed explicitly: [W (n x k), b (n)],
// with W [n, k] per token (its branch; layer.h); no b for a layer without bias.
static void explicit_lowrank(const Layer *L, TangentKey key, int r, float *v) {
    LinearShape s = linear_shape(L, 1);
    int n = s.n, k = s.k;
    float *At = fg_alloc_floats((size_t)r * n), *Bt = fg_alloc_floats((size_t)r * k);
    key.layer = (uint32_t)L->index;
    key.stream = STREAM_LOWRANK_OUT;
    tangent_fill(key, 0, (size_t)r * n, At);
    key.stream = STREAM_LOWRANK_IN;
    tangent_fill(key, 0, (size_t)r * k, Bt);
    key.stream = STREAM_LOWRANK_BIAS;
    if (!L->no_bias) tangent_fill(key, 0, (size_t)n, v + (size_t)n * k);
    for (int o = 0; o < n; o++)
        for (int i = 0; i < k; i++) {
            double sum = 0;
            for (int j = 0; j < r; j++) sum += (double)At[j * n + o] * Bt[j * k + i];
            v[o * k + i] = (float)(sum / sqrt((double)r));
        }
    fg_free(At), fg_free(Bt);
}

static void test_lowrank_jvp_and_dots(void **state) {
    (void)state;
    Problem p = {0};
    problem_make(&p);
    const Layer *L = &p.m.layers[0];  // fc 6 -> 5
    for (int r = 1; r <= 4; r += 3) {
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &p.m, 0, 1, ROWS, 1, NULL), FG_OK);
        stage_set_tangent_rank(&st, r);
        TangentKey key = tangent_key(SEED, 5, 2, 0);
        const float *y, *ydot;
        stage_forward(&st, p.params, &key, p.x[0], NULL, ROWS, NULL, &y, &ydot);
        float v[6 * 5 + 5], want[ROWS * 5], yy[ROWS * 5];
        explicit_lowrank(L, key, r, v);
        layer_ops(L)->jvp(L, p.params, v, p.x[0], NULL, yy, want, ROWS, 1);
        for (int i = 0; i < ROWS * L->out; i++)
            if (!(fabs(ydot[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i]))))
                fail_msg("rank %d: jvp[%d] = %.7g, along the explicit tangent %.7g", r, i, ydot[i], want[i]);
        double dots = 0;
        stage_tangent_dots(&st, key, 1, p.params, &dots);
        if (!(fabs(dots - dot(p.params, v, L->param_count)) <= 1e-5 * (1.0 + fabs(dots))))
            fail_msg("rank %d: tangent dots %.7g, explicit %.7g", r, dots, dot(p.params, v, L->param_count));
        float g[6 * 5 + 5] = {0}, coeff = 0.5f;
        stage_add_tangents(&st, key, 1, &coeff, g);
        for (size_t i = 0; i < L->param_count; i++)
            if (!(fabsf(g[i] - 0.5f * v[i]) <= 1e-6f * (1.0f + fabsf(v[i]))))
                fail_msg("rank %d: add_tangents[%zu] = %.7g, want %.7g", r, i, g[i], 0.5f * v[i]);
        stage_free(&st);
    }
    problem_free(&p);
}

// E[(g.v)^2 |v|^2] - |g|^2 for rank-r weight tangents (header, 5).
static double lowrank_variance(const Model *m, const float *g, int r) {
    double t = 0, g2_total = 0, n_total = 0, g2n = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const Layer *L = &m->layers[l];
        if (!L->param_count) continue;
        const float *gw = g + L->param_offset, *gb = gw + (size_t)L->in * L->out;
        double w2 = dot(gw, gw, (size_t)L->in * L->out), b2 = dot(gb, gb, L->out);
        double nw = (double)L->in * L->out, nb = L->out;
        t += ((L->out + 2.0) * (L->in + 2.0) + (r - 1.0) * (nw + 2.0)) * w2 / r + (nb + 2.0) * b2;
        g2_total += w2 + b2, n_total += nw + nb, g2n += w2 * nw + b2 * nb;
    }
    // sum over blocks i != j of |g_i|^2 n_j = |g|^2 n - sum_i |g_i|^2 n_i
    return t + g2_total * n_total - g2n - g2_total;
}

static void test_lowrank_unbiased_with_formula_variance(void **state) {
    (void)state;
    Problem p = {0};
    problem_make(&p);
    size_t dim = p.dim;
    for (int r = 1; r <= 3; r += 2) {
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &p.m, 0, p.m.n_layers, ROWS, 1, NULL), FG_OK);
        stage_set_tangent_rank(&st, r);
        float *est = fg_alloc_floats(dim);
        double *sum = calloc(dim, sizeof(double)), s1 = 0, s2 = 0, pred = 0;
        for (int b = 0; b < N; b++) pred += lowrank_variance(&p.m, p.g[b], r) / ((double)N * N);
        for (uint32_t t = 0; t < T; t++) {
            float d[N], coeff[N];
            TangentKey key = tangent_key(SEED, 10000 + t, 0, 0);
            for (int b = 0; b < N; b++) {
                const float *y, *ydot;
                key.microbatch = (uint32_t)b;
                stage_forward(&st, p.params, &key, p.x[b], NULL, ROWS, NULL, &y, &ydot);
                loss_jvp(y, ydot, p.labels[b], ROWS, logit_rows(C), 1, &d[b]);
                coeff[b] = d[b] / N;
            }
            key.microbatch = 0;
            memset(est, 0, dim * sizeof(float));
            stage_add_tangents(&st, key, N, coeff, est);
            double e2 = dist2(est, p.g_true, dim);
            s1 += e2, s2 += e2 * e2;
            for (size_t i = 0; i < dim; i++) sum[i] += est[i];
        }
        float *mean = fg_alloc_floats(dim);
        for (size_t i = 0; i < dim; i++) mean[i] = (float)(sum[i] / T);
        double err2 = dist2(mean, p.g_true, dim), var = s1 / T;
        double se = sqrt(fmax(s2 / T - var * var, 0.0) / T);
        printf("# low-rank r=%d  |mean - g|^2 = %.4g  var/T = %.4g  var = %.4g +- %.2g  "
               "predicted %.4g (ratio %.3f)\n", r, err2, var / T, var, se, pred, var / pred);
        char name[32];
        snprintf(name, sizeof name, "low-rank r=%d", r);
        assert_draws_match(name, err2, var, se, pred, T);
        free(sum);
        fg_free(est), fg_free(mean);
        stage_free(&st);
    }
    problem_free(&p);
}

// Low-rank tangents on the GPT's layers, one layer per stage: each linear (plain, residual, the
// tied head without bias) reads its branch inside the token row and adds x V^T + vb on every
// token, as the layer's JVP along the explicit tangent does; LayerNorm and the embedding keep
// full tangents. Dots and the estimate agree with the same tangent.
// Returns the number of linear layers.
static int check_lowrank_layers(const Model *m) {
    enum { B = 2, R = 2 };
    float *p = fg_alloc_floats(m->n_params);
    model_init_params(m, p, SEED);
    Rng rng = {SEED};
    for (size_t i = 0; i < m->n_params; i++) p[i] += 0.1f * rng_uniform(&rng);
    int linears = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const Layer *L = &m->layers[l];
        if (!L->param_count) continue;
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, m, l, l + 1, B, 1, NULL), FG_OK);
        stage_set_tangent_rank(&st, R);
        const float *pl = p + L->param_offset;
        float *x = fg_alloc_floats((size_t)B * L->in), *v = fg_alloc_floats(L->param_count);
        float *yy = fg_alloc_floats((size_t)B * L->out), *want = fg_alloc_floats((size_t)B * L->out);
        for (int i = 0; i < B * L->in; i++) x[i] = l ? rng_uniform(&rng) : (float)rng_int(&rng, 0, 255);
        TangentKey key = tangent_key(SEED, 3, 1, 0);
        key.layer = (uint32_t)l;
        if (L->kind == LAYER_LINEAR) {
            explicit_lowrank(L, key, R, v);
            linears++;
        } else {
            tangent_fill(key, 0, L->param_count, v);
        }
        const float *y, *ydot;
        stage_forward(&st, pl, &key, x, NULL, B, NULL, &y, &ydot);
        layer_ops(L)->jvp(L, pl, v, x, NULL, yy, want, B, 1);
        for (int i = 0; i < B * L->out; i++)
            if (!(fabs(ydot[i] - want[i]) <= 1e-5 * (1.0 + fabs(want[i]))))
                fail_msg("%s: jvp[%d] = %.7g, along the explicit tangent %.7g", L->name, i, ydot[i], want[i]);
        double dots = 0, want_dot = dot(pl, v, L->param_count);
        stage_tangent_dots(&st, key, 1, pl, &dots);
        if (!(fabs(dots - want_dot) <= 1e-5 * (1.0 + fabs(want_dot))))
            fail_msg("%s: tangent dots %.7g, explicit %.7g", L->name, dots, want_dot);
        float *est = fg_alloc_floats(L->param_count), coeff = -2.0f;
        stage_add_tangents(&st, key, 1, &coeff, est);
        for (size_t i = 0; i < L->param_count; i++)
            if (!(fabsf(est[i] + 2.0f * v[i]) <= 1e-5f * (1.0f + fabsf(v[i]))))
                fail_msg("%s: add_tangents[%zu] = %.7g, want %.7g", L->name, i, est[i], -2.0f * v[i]);
        fg_free(x), fg_free(v), fg_free(yy), fg_free(want), fg_free(est);
        stage_free(&st);
    }
    fg_free(p);
    return linears;
}

static void test_lowrank_gpt_layers(void **state) {
    (void)state;
    static Model m;
    GptShape g = {.n_layer = 1, .n_embd = 8, .n_head = 2, .ctx = 4, .vocab = 256, .pad_vocab = 1};
    assert_int_equal(model_build_gpt(&m, g, NULL), FG_OK);
    assert_int_equal(check_lowrank_layers(&m), 5);  // c_attn, attn.c_proj, c_fc, mlp.c_proj, lm_head
}

// The same on Llama's layers (RMSNorm, q/k norm: full tangents; the bias-free projections:
// low-rank).
static void test_lowrank_llama_layers(void **state) {
    (void)state;
    static Model m;
    LlamaShape g = {.n_layer = 1, .n_embd = 8, .n_head = 4, .n_kv_head = 2, .head_dim = 4,
                    .intermediate = 12, .ctx = 4, .vocab = 256, .pad_vocab = 1, .rms_eps = 1e-6f,
                    .rope = {.theta = 10000}, .qk_norm = 1};
    assert_int_equal(model_build_llama(&m, g, NULL), FG_OK);
    assert_int_equal(check_lowrank_layers(&m), 5);  // qkv, o_proj, gate_up, down_proj, lm_head
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jvp_against_differences),
        cmocka_unit_test(test_unbiased_with_formula_variance),
        cmocka_unit_test(test_lowrank_jvp_and_dots),
        cmocka_unit_test(test_lowrank_unbiased_with_formula_variance),
        cmocka_unit_test(test_lowrank_gpt_layers),
        cmocka_unit_test(test_lowrank_llama_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
