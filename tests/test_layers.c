// Layers and loss against finite differences and against each other: jvp is J v, backward is
// J^T u, and both agree with the numerical derivative of forward, for every layer kind on
// many shapes, including the degenerate ones (one sample, one feature). Backward split in its
// input and weight halves gives the fused bits, per layer and per stage.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "layer.h"
#include "model.h"
#include "stage.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Helpers

// out = a + eps * d, in float (what a caller of forward would feed it).
static void shifted(float *out, const float *a, float eps, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + eps * d[i];
}

// Central differences need a step the float forward pass resolves (not too small) and that
// keeps the truncation error O(eps^2) small for GELU and ReLU away from its kink: 1e-2, with
// inputs and directions in [-1, 1].
#define EPS 1e-2f
// Float forward values carry ~1e-7 relative rounding, amplified by 1/(2 eps) = 50 in the
// difference, plus the GELU O(eps^2) truncation: together well under 1e-3 of the norm.
#define FD_RTOL 1e-3
// jvp and backward compute the same bilinear form two ways in float: only rounding differs.
#define DOT_RTOL 1e-5

// ---------------------------------------------------------------------------------------------
// One test case: a layer, its parameters, an input and K tangent blocks, all random.

typedef struct {
    Layer L;
    const LayerOps *ops;
    int B, K;
    size_t nx, ny, np;                // floats in x [B, in], y [B, out], the parameters
    float *x, *xdot, *p, *pdot, *u;  // u [B, out]: an output weighting / adjoint
} Case;

static const char *KIND_NAMES[LAYER_KIND_COUNT] = {
    "linear", "relu", "gelu", "embedding", "layernorm", "attention", "rmsnorm", "qknorm", "rope",
    "swiglu", "lora"};

static Case case_make(Layer L, int B, int K, uint64_t seed) {
    Case c;
    memset(&c, 0, sizeof c);
    c.L = L;
    snprintf(c.L.name, sizeof c.L.name, "%s", KIND_NAMES[L.kind]);
    c.ops = layer_ops(&c.L);
    c.L.param_count = c.ops->param_count(&c.L);
    c.B = B;
    c.K = K;
    c.nx = (size_t)B * c.L.in;
    c.ny = (size_t)B * c.L.out;
    c.np = c.L.param_count;
    c.x = fg_alloc_floats(c.nx);
    c.xdot = fg_alloc_floats((size_t)K * c.nx);
    c.p = fg_alloc_floats(c.np);
    c.pdot = fg_alloc_floats((size_t)K * c.np);
    c.u = fg_alloc_floats(c.ny);
    Rng r = {seed * 0x9E3779B97F4A7C15ULL + 1};
    fill_uniform(&r, c.x, c.nx, 2.0f);
    if (L.kind == LAYER_RELU)  // |x| >= 0.05: no finite-difference step crosses the kink
        for (size_t i = 0; i < c.nx; i++) c.x[i] += c.x[i] < 0.0f ? -0.05f : 0.05f;
    fill_uniform(&r, c.xdot, (size_t)K * c.nx, 1.0f);
    if (L.kind == LAYER_EMBEDDING)  // token ids, mid-way between integers: steps keep the id
        for (size_t i = 0; i < c.nx; i++) {
            c.x[i] = (float)(rng_int(&r, 0, L.vocab - 1)) + 0.5f;
            c.xdot[i] = 0.0f;  // ids have no tangent
        }
    fill_uniform(&r, c.p, c.np, 1.0f);
    fill_uniform(&r, c.pdot, (size_t)K * c.np, 1.0f);
    fill_uniform(&r, c.u, c.ny, 1.0f);
    return c;
}

static void case_free(Case *c) {
    fg_free(c->x);
    fg_free(c->xdot);
    fg_free(c->p);
    fg_free(c->pdot);
    fg_free(c->u);
}

// The MLP shapes every layer test runs on: the corners, then random ones.
#define N_SHAPES 14
typedef struct {
    int B, in, out, K;
} Shape;

static Shape shape_at(int i) {
    static const Shape corners[] = {{1, 1, 1, 1}, {1, 13, 1, 3}, {7, 1, 13, 2}, {7, 13, 13, 3}};
    int n_corners = (int)(sizeof corners / sizeof corners[0]);
    if (i < n_corners) return corners[i];
    Rng r = {1000u + (uint64_t)i};
    Shape s = {rng_int(&r, 1, 7), rng_int(&r, 1, 13), rng_int(&r, 1, 13), rng_int(&r, 1, 3)};
    return s;
}

// The GPT's layers on sequences (layer.h): per-token widths, carried residual streams.
typedef struct {
    Layer L;  // kind and shape fields; in and out per token here
    int B, K;
} SeqCase;

static const SeqCase SEQ_CASES[] = {
    {{.kind = LAYER_LINEAR, .in = 8, .out = 10, .tokens = 3, .carry = 4}, 2, 2},  // [x, W h + b]
    {{.kind = LAYER_LINEAR, .in = 12, .out = 4, .tokens = 3, .carry = 4, .residual = 1}, 2, 2},
    {{.kind = LAYER_LINEAR, .in = 4, .out = 5, .tokens = 3, .no_bias = 1}, 2, 1},  // tied head
    {{.kind = LAYER_GELU, .in = 8, .out = 8, .tokens = 2, .carry = 3}, 3, 2},
    {{.kind = LAYER_LAYERNORM, .in = 5, .out = 5, .tokens = 3}, 2, 2},
    {{.kind = LAYER_LAYERNORM, .in = 5, .out = 10, .tokens = 3, .carry = 5}, 2, 2},
    {{.kind = LAYER_LAYERNORM, .in = 1, .out = 1, .tokens = 1}, 1, 1},  // one feature: LN(x) = beta
    {{.kind = LAYER_ATTENTION, .in = 16, .out = 8, .tokens = 4, .carry = 4, .heads = 2}, 2, 2},
    {{.kind = LAYER_ATTENTION, .in = 24, .out = 12, .tokens = 1, .carry = 6, .heads = 3}, 2, 1},
    {{.kind = LAYER_ATTENTION, .in = 24, .out = 12, .tokens = 5, .carry = 6, .heads = 1}, 1, 3},
    {{.kind = LAYER_EMBEDDING, .in = 1, .out = 4, .tokens = 3, .vocab = 5}, 2, 2},
    // Llama's and Qwen3's (model_llama.c): a token of [x (2), q (H 4), k (Hkv 4), v (Hkv 4)].
    {{.kind = LAYER_EMBEDDING, .in = 1, .out = 4, .tokens = 3, .vocab = 5, .no_positions = 1}, 2, 2},
    {{.kind = LAYER_RMSNORM, .in = 5, .out = 5, .tokens = 3, .eps = 1e-6f}, 2, 2},
    {{.kind = LAYER_RMSNORM, .in = 5, .out = 10, .tokens = 3, .carry = 5, .eps = 1e-5f}, 2, 2},
    {{.kind = LAYER_RMSNORM, .in = 1, .out = 1, .tokens = 1, .eps = 1e-6f}, 1, 1},
    {{.kind = LAYER_QKNORM, .in = 18, .out = 18, .tokens = 3, .carry = 2, .heads = 2, .kv_heads = 1,
      .head_dim = 4, .eps = 1e-6f}, 2, 2},
    {{.kind = LAYER_ROPE, .in = 18, .out = 18, .tokens = 5, .carry = 2, .heads = 2, .kv_heads = 1,
      .head_dim = 4, .rope = {.theta = 10000}}, 2, 2},
    // Llama 3's scaling with d = 6 at theta 100: wavelengths 6.3 (blended), 29 and 135 (divided).
    {{.kind = LAYER_ROPE, .in = 28, .out = 28, .tokens = 7, .carry = 4, .heads = 2, .kv_heads = 2,
      .head_dim = 6, .rope = {.theta = 100, .factor = 8, .low = 1, .high = 4, .original = 16}}, 1, 2},
    {{.kind = LAYER_ATTENTION, .in = 26, .out = 14, .tokens = 4, .carry = 2, .heads = 4,
      .kv_heads = 2, .head_dim = 3}, 2, 2},  // grouped-query, head_dim != C / heads
    {{.kind = LAYER_ATTENTION, .in = 13, .out = 9, .tokens = 3, .carry = 1, .heads = 4,
      .kv_heads = 1, .head_dim = 2}, 1, 2},  // one kv head
    {{.kind = LAYER_SWIGLU, .in = 11, .out = 7, .tokens = 2, .carry = 3}, 2, 2},
    {{.kind = LAYER_SWIGLU, .in = 4, .out = 2, .tokens = 3}, 1, 1},
    // LoRA: [x (2), h (3)] -> [x, h, delta (3+2+2)] with parts 0, 2 adapted; rank 1, one part;
    // the projections that add a delta (their tail), plain and residual.
    {{.kind = LAYER_LORA, .in = 5, .out = 12, .tokens = 3, .carry = 2, .lora_rank = 2,
      .lora_scale = 1.5f, .lora_parts = {3, 2, 2}, .lora_mask = 5}, 2, 2},
    {{.kind = LAYER_LORA, .in = 7, .out = 10, .tokens = 2, .carry = 3, .lora_rank = 1,
      .lora_scale = 0.5f, .lora_parts = {3}, .lora_mask = 1}, 3, 1},
    {{.kind = LAYER_LINEAR, .in = 9, .out = 6, .tokens = 3, .carry = 2, .tail = 4, .no_bias = 1}, 2, 2},
    {{.kind = LAYER_LINEAR, .in = 8, .out = 3, .tokens = 2, .carry = 3, .tail = 3, .residual = 1,
      .no_bias = 1}, 2, 2},
};
#define N_SEQ_CASES ((int)(sizeof SEQ_CASES / sizeof SEQ_CASES[0]))
#define N_CASES (3 * N_SHAPES + N_SEQ_CASES)

// Case i: every MLP kind on every shape, then the sequence cases.
static Case case_at(int i) {
    if (i >= 3 * N_SHAPES) {
        SeqCase sc = SEQ_CASES[i - 3 * N_SHAPES];
        int T = layer_tokens(&sc.L);
        sc.L.in *= T, sc.L.out *= T;
        return case_make(sc.L, sc.B, sc.K, (uint64_t)i);
    }
    LayerKind kind = (LayerKind)(i / N_SHAPES);
    Shape sh = shape_at(i % N_SHAPES);
    Layer L = {.kind = kind, .in = sh.in, .out = kind == LAYER_LINEAR ? sh.out : sh.in};
    return case_make(L, sh.B, sh.K, (uint64_t)(kind * 100 + i % N_SHAPES));
}

#define FOR_EACH_CASE(c)                                                          \
    for (int case_ = 0; case_ < N_CASES; case_++)                                 \
        for (Case c = case_at(case_); c.ops; case_free(&c), c.ops = NULL)

#define CASE_FMT "%s B=%d in=%d out=%d K=%d tokens=%d"
#define CASE_ARGS(c) KIND_NAMES[(c).L.kind], (c).B, (c).L.in, (c).L.out, (c).K, layer_tokens(&(c).L)

// f(x, p) = <u, y(x, p)> in double: the scalar whose gradient backward computes.
static double weighted_output(const Case *c, const float *x, const float *p, float *y) {
    c->ops->forward(&c->L, p, x, y, c->B);
    return dot(c->u, y, c->ny);
}

// ---------------------------------------------------------------------------------------------
// 1. jvp = central differences of forward along (xdot_k, pdot_k), for every block k.

static void test_jvp_matches_finite_differences(void **state) {
    (void)state;
    FOR_EACH_CASE(c) {
        float *y = fg_alloc_floats(c.ny), *ydot = fg_alloc_floats((size_t)c.K * c.ny);
        float *yp = fg_alloc_floats(c.ny), *ym = fg_alloc_floats(c.ny);
        float *xs = fg_alloc_floats(c.nx), *ps = fg_alloc_floats(c.np);
        c.ops->jvp(&c.L, c.p, c.pdot, c.x, c.xdot, y, ydot, c.B, c.K);
        for (int k = 0; k < c.K; k++) {
            const float *xd = c.xdot + k * c.nx, *pd = c.pdot + k * c.np, *yd = ydot + k * c.ny;
            shifted(xs, c.x, EPS, xd, c.nx);
            shifted(ps, c.p, EPS, pd, c.np);
            c.ops->forward(&c.L, ps, xs, yp, c.B);
            shifted(xs, c.x, -EPS, xd, c.nx);
            shifted(ps, c.p, -EPS, pd, c.np);
            c.ops->forward(&c.L, ps, xs, ym, c.B);
            double err2 = 0.0;
            for (size_t i = 0; i < c.ny; i++) {
                double fd = ((double)yp[i] - ym[i]) / (2.0 * EPS);
                err2 += (fd - yd[i]) * (fd - yd[i]);
            }
            double err = sqrt(err2), ref = norm(yd, c.ny);
            if (!(err <= FD_RTOL * ref + 1e-6))
                fail_msg(CASE_FMT " k=%d: |jvp - fd| = %g, |jvp| = %g", CASE_ARGS(c), k, err, ref);
        }
        fg_free(y), fg_free(ydot), fg_free(yp), fg_free(ym), fg_free(xs), fg_free(ps);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. backward with dy = u is the gradient of f = <u, y>: against central differences of f
//    along random directions and along single coordinates of x and of p.

// |fd - analytic| <= FD_RTOL * scale, reported with context.
static void check_fd(const Case *c, const char *what, long index, double fd, double analytic,
                     double scale) {
    if (!(fabs(fd - analytic) <= FD_RTOL * scale + 1e-6))
        fail_msg(CASE_FMT " %s[%ld]: fd %.8g vs backward %.8g (scale %g)", CASE_ARGS(*c), what,
                 index, fd, analytic, scale);
}

typedef struct {
    const Case *c;
    float *y;  // scratch output
} OutputAt;

static double output_at(void *arg) {  // weighted_output at the case's current x and p
    const OutputAt *a = arg;
    return weighted_output(a->c, a->c->x, a->c->p, a->y);
}

static void test_backward_matches_finite_differences(void **state) {
    (void)state;
    FOR_EACH_CASE(c) {
        float *dx = fg_alloc_floats(c.nx), *dp = fg_alloc_floats(c.np), *y = fg_alloc_floats(c.ny);
        float *xs = fg_alloc_floats(c.nx), *ps = fg_alloc_floats(c.np);
        float *a = fg_alloc_floats(c.nx), *b = fg_alloc_floats(c.np);
        c.ops->backward(&c.L, c.p, c.x, c.u, dx, dp, c.B);  // dp is zero from fg_alloc_floats
        double ndx = norm(dx, c.nx), ndp = norm(dp, c.np);

        // Random directions (a over x, b over p), moved together and one at a time.
        Rng r = {77u + (uint64_t)c.nx * 31u + c.np};
        for (int trial = 0; trial < 3; trial++) {
            fill_uniform(&r, a, c.nx, trial == 2 ? 0.0f : 1.0f);  // trial 1: x only
            fill_uniform(&r, b, c.np, trial == 1 ? 0.0f : 1.0f);  // trial 2: p only
            shifted(xs, c.x, EPS, a, c.nx);
            shifted(ps, c.p, EPS, b, c.np);
            double fp = weighted_output(&c, xs, ps, y);
            shifted(xs, c.x, -EPS, a, c.nx);
            shifted(ps, c.p, -EPS, b, c.np);
            double fm = weighted_output(&c, xs, ps, y);
            double analytic = dot(dx, a, c.nx) + dot(dp, b, c.np);
            check_fd(&c, "direction", trial, (fp - fm) / (2.0 * EPS), analytic,
                     ndx * norm(a, c.nx) + ndp * norm(b, c.np));
        }

        // Single coordinates: first, middle, last of x and of p (for linear, the last is a bias).
        size_t picks[3];
        for (int which = 0; which < 2; which++) {
            size_t n = which ? c.np : c.nx;
            float *base = which ? c.p : c.x, *grad = which ? dp : dx;
            if (!n) continue;
            picks[0] = 0, picks[1] = n / 2, picks[2] = n - 1;
            double rms = (which ? ndp : ndx) / sqrt((double)n);
            OutputAt at = {&c, y};
            for (int j = 0; j < 3; j++) {
                size_t i = picks[j];
                double fd = central_difference(base, i, EPS, output_at, &at);
                check_fd(&c, which ? "dp" : "dx", (long)i, fd, grad[i], fabs(grad[i]) + rms);
            }
        }
        fg_free(dx), fg_free(dp), fg_free(y), fg_free(xs), fg_free(ps), fg_free(a), fg_free(b);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The dot-product test <u, J v> = <J^T u, v>, and the accumulation contract of backward.

static void test_jvp_backward_dot_product(void **state) {
    (void)state;
    FOR_EACH_CASE(c) {
        float *y = fg_alloc_floats(c.ny), *ydot = fg_alloc_floats((size_t)c.K * c.ny);
        float *dx = fg_alloc_floats(c.nx), *dx2 = fg_alloc_floats(c.nx);
        float *dp = fg_alloc_floats(c.np), *dp2 = fg_alloc_floats(c.np);
        float *dp3 = fg_alloc_floats(c.np), *pre = fg_alloc_floats(c.np);
        c.ops->jvp(&c.L, c.p, c.pdot, c.x, c.xdot, y, ydot, c.B, c.K);
        c.ops->backward(&c.L, c.p, c.x, c.u, dx, dp, c.B);
        for (int k = 0; k < c.K; k++) {
            const float *yd = ydot + k * c.ny, *xd = c.xdot + k * c.nx, *pd = c.pdot + k * c.np;
            double lhs = dot(c.u, yd, c.ny);
            double rhs = dot(dx, xd, c.nx) + dot(dp, pd, c.np);
            double scale = norm(c.u, c.ny) * norm(yd, c.ny) + norm(dx, c.nx) * norm(xd, c.nx) +
                           norm(dp, c.np) * norm(pd, c.np);
            if (!(fabs(lhs - rhs) <= DOT_RTOL * scale))
                fail_msg(CASE_FMT " k=%d: <u, J v> = %.9g but <J^T u, v> = %.9g", CASE_ARGS(c),
                         k, lhs, rhs);
        }

        // dp accumulates: two calls from zero give twice one call, and a call on top of
        // existing values adds to them (up to float rounding: the bias sums its rows one by one
        // into what is there, so a + (u0 + u1 + ...) is not bitwise 2a).
        c.ops->backward(&c.L, c.p, c.x, c.u, dx2, dp2, c.B);
        c.ops->backward(&c.L, c.p, c.x, c.u, dx2, dp2, c.B);
        double ndp = norm(dp, c.np);
        for (size_t i = 0; i < c.np; i++)
            if (!(fabs((double)dp2[i] - 2.0 * dp[i]) <= 1e-6 * (2.0 * fabs(dp[i]) + ndp)))
                fail_msg(CASE_FMT " dp[%zu]: twice %.9g, once %.9g", CASE_ARGS(c), i, dp2[i],
                         dp[i]);
        Rng r = {5u + c.np};
        fill_uniform(&r, pre, c.np, 1.0f);
        memcpy(dp3, pre, c.np * sizeof(float));
        c.ops->backward(&c.L, c.p, c.x, c.u, NULL, dp3, c.B);  // dx == NULL: dp still computed
        for (size_t i = 0; i < c.np; i++)
            assert_true(fabs((double)dp3[i] - pre[i] - dp[i]) <= 1e-6 * (fabs(pre[i]) + ndp));
        // dx is written, not accumulated: garbage in it before the call does not matter.
        for (size_t i = 0; i < c.nx; i++) dx2[i] = 1e3f;
        c.ops->backward(&c.L, c.p, c.x, c.u, dx2, dp3, c.B);
        assert_memory_equal(dx, dx2, c.nx * sizeof(float));
        fg_free(y), fg_free(ydot), fg_free(dx), fg_free(dx2), fg_free(dp), fg_free(dp2);
        fg_free(dp3), fg_free(pre);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. jvp's primal output is forward's, bit for bit; NULL tangents mean zero tangents.

static void assert_floats_equal(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i])) fail_msg("element %zu: %.9g != %.9g", i, a[i], b[i]);
}

static void test_jvp_primal_and_null_tangents(void **state) {
    (void)state;
    FOR_EACH_CASE(c) {
        size_t nyd = (size_t)c.K * c.ny;
        float *y0 = fg_alloc_floats(c.ny), *y1 = fg_alloc_floats(c.ny);
        float *yd0 = fg_alloc_floats(nyd), *yd1 = fg_alloc_floats(nyd);
        float *zx = fg_alloc_floats((size_t)c.K * c.nx), *zp = fg_alloc_floats((size_t)c.K * c.np);
        c.ops->forward(&c.L, c.p, c.x, y0, c.B);
        c.ops->jvp(&c.L, c.p, c.pdot, c.x, c.xdot, y1, yd1, c.B, c.K);
        assert_memory_equal(y0, y1, c.ny * sizeof(float));

        // xdot = NULL vs zeros (stale values in ydot must be overwritten either way).
        for (size_t i = 0; i < nyd; i++) yd0[i] = yd1[i] = 7.0f;
        c.ops->jvp(&c.L, c.p, c.pdot, c.x, NULL, y1, yd0, c.B, c.K);
        c.ops->jvp(&c.L, c.p, c.pdot, c.x, zx, y1, yd1, c.B, c.K);
        assert_floats_equal(yd0, yd1, nyd);
        assert_memory_equal(y0, y1, c.ny * sizeof(float));
        if (c.np == 0)  // no parameters and no input tangent: zero
            for (size_t i = 0; i < nyd; i++) assert_true(yd0[i] == 0.0f);

        // pdot = NULL vs zeros.
        for (size_t i = 0; i < nyd; i++) yd0[i] = yd1[i] = 7.0f;
        c.ops->jvp(&c.L, c.p, NULL, c.x, c.xdot, y1, yd0, c.B, c.K);
        c.ops->jvp(&c.L, c.p, zp, c.x, c.xdot, y1, yd1, c.B, c.K);
        assert_floats_equal(yd0, yd1, nyd);

        // Both NULL: ydot is all zero.
        for (size_t i = 0; i < nyd; i++) yd0[i] = 7.0f;
        c.ops->jvp(&c.L, c.p, NULL, c.x, NULL, y1, yd0, c.B, c.K);
        for (size_t i = 0; i < nyd; i++) assert_true(yd0[i] == 0.0f);
        fg_free(y0), fg_free(y1), fg_free(yd0), fg_free(yd1), fg_free(zx), fg_free(zp);
    }
}

// ---------------------------------------------------------------------------------------------
// 4b. Backward in two halves (zero-bubble Bi and Bw): dp == NULL gives the fused dx, dx == NULL
//     (without the parameters: p == NULL) gives the fused dp, bit for bit.

static void test_backward_halves_match_fused(void **state) {
    (void)state;
    FOR_EACH_CASE(c) {
        float *dx0 = fg_alloc_floats(c.nx), *dx1 = fg_alloc_floats(c.nx);
        float *dp0 = fg_alloc_floats(c.np), *dp1 = fg_alloc_floats(c.np);
        Rng r = {9u + c.np + c.nx};
        fill_uniform(&r, dp0, c.np, 1.0f);  // accumulating on top of nonzero values
        memcpy(dp1, dp0, c.np * sizeof(float));
        c.ops->backward(&c.L, c.p, c.x, c.u, dx0, dp0, c.B);
        for (size_t i = 0; i < c.nx; i++) dx1[i] = 1e3f;
        c.ops->backward(&c.L, c.p, c.x, c.u, dx1, NULL, c.B);  // Bi
        assert_floats_equal(dx0, dx1, c.nx);
        c.ops->backward(&c.L, layer_grad_reads_params(&c.L) ? c.p : NULL, c.x, c.u, NULL, dp1, c.B);
        assert_floats_equal(dp0, dp1, c.np);
        fg_free(dx0), fg_free(dx1), fg_free(dp0), fg_free(dp1);
    }
}

// Bi then Bw over every stage [first, last) of a small MLP (stages that start or end on an
// activation, single layers) gives stage_backward's dx and grad bit for bit, grad accumulating
// on top of nonzero values; with dx and without (a first stage); with FP32 or BF16 values
// between layers (type: Bi's kept adjoints then BF16, half the floats).
static void check_stage_split(const Model *m, const float *params, int first, int last, FgDtype type) {
    enum { R = 5 };
    Stage st;
    assert_int_equal(stage_init(&st, &backend_cpu, m, first, last, R, 0, NULL), FG_OK);
    stage_set_act_type(&st, type);
    const float *p = params + st.param_base, *y;
    size_t nx = (size_t)R * m->layers[first].in, ny = (size_t)R * m->layers[last - 1].out;
    size_t np = st.param_count, na = stage_adjoint_floats(&st, R);
    float *x = fg_alloc_floats(nx), *dy = fg_alloc_floats(ny), *g0 = fg_alloc_floats(np + 1);
    float *g_fused = fg_alloc_floats(np + 1), *g_split = fg_alloc_floats(np + 1);
    float *dx_fused = fg_alloc_floats(nx), *dx_split = fg_alloc_floats(nx);
    float *adj = fg_alloc_floats(na + 1), *stash = fg_alloc_floats(stage_stash_floats(&st, R));
    Rng r = {31u * (uint64_t)first + (uint64_t)last};
    fill_uniform(&r, x, nx, 2.0f);
    fill_uniform(&r, dy, ny, 1.0f);
    stage_act_round(&st, last, dy, ny);  // an output adjoint arrives in its cut's type
    fill_uniform(&r, g0, np, 1.0f);
    stage_forward(&st, p, NULL, x, NULL, R, stash, &y, NULL);
    for (int with_dx = 1; with_dx >= 0; with_dx--) {
        memcpy(g_fused, g0, np * sizeof(float));
        memcpy(g_split, g0, np * sizeof(float));
        for (size_t i = 0; i < nx; i++) dx_split[i] = 1e3f;
        for (size_t i = 0; i < na; i++) adj[i] = -1e3f;  // stale values must not matter
        stage_backward(&st, p, stash, dy, with_dx ? dx_fused : NULL, g_fused, R);
        stage_backward_input(&st, p, stash, dy, with_dx ? dx_split : NULL, adj, R);
        stage_backward_weight(&st, NULL, stash, adj, g_split, R);
        if (with_dx) assert_floats_equal(dx_fused, dx_split, nx);
        assert_floats_equal(g_fused, g_split, np);
        if (np) assert_true(memcmp(g_fused, g0, np * sizeof(float)) != 0);  // grad did change
    }
    float *bufs[] = {x, dy, g0, g_fused, g_split, dx_fused, dx_split, adj, stash};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) fg_free(bufs[i]);
    stage_free(&st);
}

static void test_stage_backward_split_matches_fused(void **state) {
    (void)state;
    const char *acts[] = {"relu", "gelu"};
    for (int a = 0; a < 2; a++) {
        Model m;
        FgError err = {0};
        assert_int_equal(model_build_mlp(&m, "7-6-5-4-3", acts[a], &err), FG_OK);
        float *params = fg_alloc_floats(m.n_params);
        model_init_params(&m, params, 7);
        Rng r = {3};
        for (size_t i = 0; i < m.n_params; i++) params[i] += 0.2f * rng_uniform(&r);
        for (int first = 0; first < m.n_layers; first++)
            for (int last = first + 1; last <= m.n_layers; last++)
                for (int t = 0; t < 2; t++) check_stage_split(&m, params, first, last, t ? FG_BF16 : FG_F32);

        // Layout: the outputs of fc layers 0, 2, 4, 6 (6, 5, 4, 3 wide), in order.
        Stage st;
        assert_int_equal(stage_init(&st, &backend_cpu, &m, 0, m.n_layers, 2, 0, &err), FG_OK);
        assert_int_equal(stage_adjoint_offset(&st, 2, 2), 2 * 6);
        assert_int_equal(stage_adjoint_offset(&st, 6, 2), 2 * (6 + 5 + 4));
        assert_int_equal(stage_adjoint_floats(&st, 2), 2 * (6 + 5 + 4 + 3));
        stage_set_act_type(&st, FG_BF16);  // two to a float, the logits (the model's output) FP32
        assert_int_equal(stage_adjoint_offset(&st, 6, 2), 2 * (6 + 5 + 4) / 2);
        assert_int_equal(stage_adjoint_floats(&st, 2), 2 * (6 + 5 + 4) / 2 + 2 * 3);
        stage_free(&st);
        fg_free(params);
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Softmax + cross-entropy.

typedef struct {
    int B, C, K;
    float *z, *zdot;
    Label *labels;
} LossCase;

static LossCase loss_case_make(int i) {
    Rng r = {4242u + (uint64_t)i};
    LossCase c = {rng_int(&r, 1, 7), rng_int(&r, 1, 13), rng_int(&r, 1, 3), NULL, NULL, NULL};
    if (i == 0) c.B = 1, c.C = 2, c.K = 1;
    if (i == 1) c.B = 7, c.C = 13, c.K = 3;
    size_t n = (size_t)c.B * c.C;
    c.z = fg_alloc_floats(n);
    c.zdot = fg_alloc_floats((size_t)c.K * n);
    c.labels = fg_alloc_bytes((size_t)c.B * sizeof(Label));
    fill_uniform(&r, c.z, n, 3.0f);
    fill_uniform(&r, c.zdot, (size_t)c.K * n, 1.0f);
    for (int b = 0; b < c.B; b++) c.labels[b] = (Label)rng_int(&r, 0, c.C - 1);
    return c;
}

static void loss_case_free(LossCase *c) {
    fg_free(c->z);
    fg_free(c->zdot);
    fg_free(c->labels);
}

#define N_LOSS_CASES 16

static double loss_at(void *arg) {  // the loss at the case's current logits
    const LossCase *c = arg;
    return loss_forward(c->z, c->labels, c->B, logit_rows(c->C), NULL);
}

static void test_loss_derivatives(void **state) {
    (void)state;
    for (int ci = 0; ci < N_LOSS_CASES; ci++) {
        LossCase c = loss_case_make(ci);
        size_t n = (size_t)c.B * c.C;
        float *d = fg_alloc_floats((size_t)c.K), *dz = fg_alloc_floats(n);
        float *zs = fg_alloc_floats(n);
        float loss = loss_forward(c.z, c.labels, c.B, logit_rows(c.C), NULL);
        assert_true(loss_jvp(c.z, c.zdot, c.labels, c.B, logit_rows(c.C), c.K, d) == loss);
        assert_true(loss_backward(c.z, c.labels, c.B, logit_rows(c.C), dz) == loss);
        double ndz = norm(dz, n);
        for (int k = 0; k < c.K; k++) {
            const float *zd = c.zdot + k * n;
            // d[k] is the derivative of loss_forward along zdot_k ...
            shifted(zs, c.z, EPS, zd, n);
            double lp = loss_forward(zs, c.labels, c.B, logit_rows(c.C), NULL);
            shifted(zs, c.z, -EPS, zd, n);
            double lm = loss_forward(zs, c.labels, c.B, logit_rows(c.C), NULL);
            double fd = (lp - lm) / (2.0 * EPS), scale = ndz * norm(zd, n);
            if (!(fabs(fd - d[k]) <= FD_RTOL * scale + 1e-6))
                fail_msg("B=%d C=%d k=%d: d %.8g vs fd %.8g", c.B, c.C, k, d[k], fd);
            // ... and the dot product of the gradient with zdot_k.
            double dzdot = dot(dz, zd, n);
            if (!(fabs(dzdot - d[k]) <= DOT_RTOL * scale + 1e-9))
                fail_msg("B=%d C=%d k=%d: d %.9g vs <dz, zdot> %.9g", c.B, c.C, k, d[k], dzdot);
        }
        // dz coordinate by coordinate (these matrices are small enough to check all of it).
        // A single logit moves the loss so little that the float loss's own resolution (a few
        // ulp of |loss|, divided by 2 eps) matters next to the small entries of dz = (p - y)/B.
        double rms = ndz / sqrt((double)n), resolution = 4.0 * FLT_EPSILON * loss / (2.0 * EPS);
        for (size_t i = 0; i < n; i++) {
            double fd = central_difference(c.z, i, EPS, loss_at, &c);
            if (!(fabs(fd - dz[i]) <= FD_RTOL * (fabs(dz[i]) + rms) + resolution))
                fail_msg("B=%d C=%d dz[%zu]: %.8g vs fd %.8g", c.B, c.C, i, dz[i], fd);
        }
        // Each row of dz sums to zero (softmax minus one-hot) over B rows.
        for (int b = 0; b < c.B; b++) {
            double s = 0.0;
            for (int j = 0; j < c.C; j++) s += dz[(size_t)b * c.C + j];
            assert_true(fabs(s) < 1e-6);
        }
        fg_free(d), fg_free(dz), fg_free(zs);
        loss_case_free(&c);
    }
}

static void test_loss_values_and_accuracy(void **state) {
    (void)state;
    enum { B = 6, C = 10 };
    float z[B * C], dz[B * C];
    Label labels[B] = {0, 3, 9, 0, 5, 2};
    int correct = -1;

    // Uniform logits: every row's loss is log C, whatever the common value (even a large one:
    // the max is subtracted before exp); argmax of a tie is the first class.
    const float levels[] = {0.0f, -2.5f, 80.0f, 1e4f};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        for (int i = 0; i < B * C; i++) z[i] = levels[l];
        float loss = loss_forward(z, labels, B, logit_rows(C), &correct);
        assert_true(fabs(loss - log((double)C)) < 1e-6);
        assert_int_equal(correct, 2);  // the two rows labelled 0
        loss_backward(z, labels, B, logit_rows(C), dz);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < C; j++) {
                double want = (1.0 / C - ((Label)j == labels[b])) / B;
                assert_true(fabs(dz[b * C + j] - want) < 1e-7);
            }
    }

    // Accuracy: row b puts its peak on class peak[b]; hits are the rows where it is the label.
    const int peak[B] = {0, 3, 8, 1, 5, 5};  // hits on rows 0, 1, 4
    Rng r = {99};
    for (int b = 0; b < B; b++)
        for (int j = 0; j < C; j++) z[b * C + j] = rng_uniform(&r) + (j == peak[b] ? 5.0f : 0.0f);
    float loss = loss_forward(z, labels, B, logit_rows(C), &correct);
    assert_int_equal(correct, 3);
    // The loss is the mean of -log softmax[label], here computed directly in double.
    double want = 0.0;
    for (int b = 0; b < B; b++) {
        double s = 0.0;
        for (int j = 0; j < C; j++) s += exp((double)z[b * C + j]);
        want += log(s) - z[b * C + labels[b]];
    }
    assert_true(fabs(loss - want / B) < 1e-5 * (want / B));
    // A shift of every logit of a row changes nothing.
    float zs[B * C];
    for (int i = 0; i < B * C; i++) zs[i] = z[i] + 100.0f;
    int correct2 = -1;
    assert_true(fabs(loss_forward(zs, labels, B, logit_rows(C), &correct2) - loss) < 1e-4);
    assert_int_equal(correct2, 3);
    // A confident right answer costs ~0; a confident wrong one costs ~the margin.
    for (int i = 0; i < C; i++) z[i] = (Label)i == labels[0] ? 30.0f : 0.0f;
    assert_true(loss_forward(z, labels, 1, logit_rows(C), &correct) < 1e-9 && correct == 1);
    for (int i = 0; i < C; i++) z[i] = i == 7 ? 30.0f : 0.0f;
    assert_true(fabs(loss_forward(z, labels, 1, logit_rows(C), &correct) - 30.0) < 1e-4 && correct == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jvp_matches_finite_differences),
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_jvp_backward_dot_product),
        cmocka_unit_test(test_jvp_primal_and_null_tangents),
        cmocka_unit_test(test_backward_halves_match_fused),
        cmocka_unit_test(test_stage_backward_split_matches_fused),
        cmocka_unit_test(test_loss_derivatives),
        cmocka_unit_test(test_loss_values_and_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
