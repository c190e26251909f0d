// SwiGLU, the Llama MLP's gate: a token [x (C), g (I), u (I)] (gate_proj and up_proj's outputs
// with the carried x) becomes [x, silu(g) * u], silu(g) = g sigmoid(g) (activation_math.h).
// No parameters.
//   jvp:      ydot = silu'(g) gdot u + silu(g) udot,  silu'(g) = s (1 + g (1 - s))
//   backward: dg = dy u silu'(g),  du = dy silu(g)
#include <string.h>

#include "activation_math.h"
#include "layer.h"

static size_t swiglu_param_count(const Layer *L) {
    (void)L;
    return 0;
}

typedef struct {
    size_t rows;
    int C, I, in, out;
} GluShape;

static GluShape glu_shape(const Layer *L, int B) {
    GluShape s = {(size_t)B * layer_tokens(L), L->carry, 0, layer_in_token(L), layer_out_token(L)};
    s.I = s.out - s.C;
    return s;
}

static void pass_carry(const GluShape *s, size_t n, const float *from, int from_width, float *to,
                       int to_width) {
    for (size_t r = 0; s->C && r < n; r++)
        memcpy(to + r * to_width, from + r * from_width, (size_t)s->C * sizeof(float));
}

static void swiglu_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    (void)p;
    GluShape s = glu_shape(L, B);
    pass_carry(&s, s.rows, x, s.in, y, s.out);
#pragma omp parallel for if (s.rows * s.in > 65536)
    for (size_t r = 0; r < s.rows; r++) {
        const float *g = x + r * s.in + s.C, *u = g + s.I;
        float *yr = y + r * s.out + s.C;
        for (int i = 0; i < s.I; i++) yr[i] = fg_silu(g[i]) * u[i];
    }
}

static void swiglu_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                       const float *xdot, float *y, float *ydot, int B, int K) {
    (void)pdot;
    GluShape s = glu_shape(L, B);
    size_t in_block = s.rows * s.in, block = s.rows * s.out;
    swiglu_forward(L, p, x, y, B);
    if (!xdot) {
        memset(ydot, 0, K * block * sizeof(float));
        return;
    }
    pass_carry(&s, K * s.rows, xdot, s.in, ydot, s.out);
#pragma omp parallel for collapse(2) if (K * in_block > 65536)
    for (int k = 0; k < K; k++)
        for (size_t r = 0; r < s.rows; r++) {
            const float *g = x + r * s.in + s.C, *u = g + s.I;
            const float *gd = xdot + k * in_block + r * s.in + s.C, *ud = gd + s.I;
            float *yd = ydot + k * block + r * s.out + s.C;
            for (int i = 0; i < s.I; i++) yd[i] = fg_silu_grad(g[i]) * gd[i] * u[i] + fg_silu(g[i]) * ud[i];
        }
}

static void swiglu_backward(const Layer *L, const float *p, const float *x, const float *dy,
                            float *dx, float *dp, int B) {
    (void)p, (void)dp;
    if (!dx) return;
    GluShape s = glu_shape(L, B);
    pass_carry(&s, s.rows, dy, s.out, dx, s.in);
#pragma omp parallel for if (s.rows * s.in > 65536)
    for (size_t r = 0; r < s.rows; r++) {
        const float *g = x + r * s.in + s.C, *u = g + s.I, *d = dy + r * s.out + s.C;
        float *dg = dx + r * s.in + s.C, *du = dg + s.I;
        for (int i = 0; i < s.I; i++) {
            dg[i] = d[i] * u[i] * fg_silu_grad(g[i]);
            du[i] = d[i] * fg_silu(g[i]);
        }
    }
}

const LayerOps swiglu_ops = {"swiglu", swiglu_param_count, swiglu_forward, swiglu_jvp,
                             swiglu_backward};
