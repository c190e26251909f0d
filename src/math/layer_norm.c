// LayerNorm over each token's C features: y = gamma * xhat + beta, xhat = (x - mean) * rstd,
// rstd = 1 / sqrt(var + eps); gamma [C] then beta [C] in the flat buffer. It reads the whole
// token; with carry (= C, a block's ln_1 and ln_2) the output keeps the token ahead of the
// normalised copy, [x, LN(x)], so the block's residual stream travels on (layer.h).
#include <math.h>
#include <string.h>

#include "norm_math.h"

static size_t norm_param_count(const Layer *L) { return 2 * (size_t)layer_in_token(L); }

typedef struct {
    float mean, rstd;
} RowStats;

static RowStats row_stats(const float *x, int C) {
    float mean = 0, var = 0;
    for (int i = 0; i < C; i++) mean += x[i];
    mean /= (float)C;
    for (int i = 0; i < C; i++) var += (x[i] - mean) * (x[i] - mean);
    RowStats st = {mean, fg_norm_rstd(var, C)};
    return st;
}

static void norm_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    NormShape s = norm_shape(L, B);
    const float *gamma = p, *beta = p + s.C;
#pragma omp parallel for if (s.rows * s.C > 65536)
    for (int r = 0; r < s.rows; r++) {
        const float *xr = x + (size_t)r * s.C;
        float *yr = y + (size_t)r * s.out;
        RowStats st = row_stats(xr, s.C);
        if (s.offset) memcpy(yr, xr, (size_t)s.C * sizeof(float));
        for (int i = 0; i < s.C; i++)
            yr[s.offset + i] = gamma[i] * fg_norm_xhat(xr[i], st.mean, st.rstd) + beta[i];
    }
}

// One token's tangent: xhat' = rstd ((xdot - mean(xdot)) - xhat mean(xhat xdot)),
// ydot = gamma xhat' + gammadot xhat + betadot (xd, gd may be NULL: zero).
static void norm_token_jvp(const NormShape *s, const float *gamma, const float *xr,
                           const float *xd, const float *gd, float *yd) {
    RowStats st = row_stats(xr, s->C);
    float mean_d = 0, mean_hd = 0;
    for (int i = 0; xd && i < s->C; i++) {
        mean_d += xd[i];
        mean_hd += fg_norm_xhat(xr[i], st.mean, st.rstd) * xd[i];
    }
    mean_d /= (float)s->C;
    mean_hd /= (float)s->C;
    if (s->offset) {
        if (xd) memcpy(yd, xd, (size_t)s->C * sizeof(float));
        else memset(yd, 0, (size_t)s->C * sizeof(float));
    }
    for (int i = 0; i < s->C; i++) {
        float xhat = fg_norm_xhat(xr[i], st.mean, st.rstd), v = 0;
        if (xd) v = fg_norm_jvp(gamma[i], st.rstd, xd[i], mean_d, xhat, mean_hd);
        if (gd) v += gd[i] * xhat + gd[s->C + i];
        yd[s->offset + i] = v;
    }
}

static void norm_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                     const float *xdot, float *y, float *ydot, int B, int K) {
    NormShape s = norm_shape(L, B);
    size_t block = (size_t)s.rows * s.out, in_block = (size_t)s.rows * s.C;
    norm_forward(L, p, x, y, B);
#pragma omp parallel for collapse(2) if (K * in_block > 65536)
    for (int k = 0; k < K; k++)
        for (int r = 0; r < s.rows; r++)
            norm_token_jvp(&s, p, x + (size_t)r * s.C,
                           xdot ? xdot + k * in_block + (size_t)r * s.C : NULL,
                           pdot ? pdot + k * L->param_count : NULL,
                           ydot + k * block + (size_t)r * s.out);
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = gamma dy_ln (+ dy's carry);
// dgamma += dy_ln xhat, dbeta += dy_ln, summed over the rows in order.
static void norm_backward(const Layer *L, const float *p, const float *x, const float *dy,
                          float *dx, float *dp, int B) {
    NormShape s = norm_shape(L, B);
    if (dx) {
#pragma omp parallel for if (s.rows * s.C > 65536)
        for (int r = 0; r < s.rows; r++) {
            const float *xr = x + (size_t)r * s.C, *dyr = dy + (size_t)r * s.out;
            float *dxr = dx + (size_t)r * s.C;
            RowStats st = row_stats(xr, s.C);
            float mean_g = 0, mean_gh = 0;
            for (int i = 0; i < s.C; i++) {
                float g = p[i] * dyr[s.offset + i];
                mean_g += g;
                mean_gh += g * (xr[i] - st.mean) * st.rstd;  // (g (x - mean)) rstd: kept as it was
            }
            mean_g /= (float)s.C;
            mean_gh /= (float)s.C;
            for (int i = 0; i < s.C; i++) {
                float xhat = fg_norm_xhat(xr[i], st.mean, st.rstd);
                float v = fg_norm_dx(st.rstd, p[i] * dyr[s.offset + i], mean_g, xhat, mean_gh);
                dxr[i] = s.offset ? dyr[i] + v : v;
            }
        }
    }
    if (!dp) return;
    for (int r = 0; r < s.rows; r++) {
        const float *xr = x + (size_t)r * s.C, *dyr = dy + (size_t)r * s.out + s.offset;
        RowStats st = row_stats(xr, s.C);
        for (int i = 0; i < s.C; i++) {
            dp[i] += dyr[i] * fg_norm_xhat(xr[i], st.mean, st.rstd);
            dp[s.C + i] += dyr[i];
        }
    }
}

const LayerOps layernorm_ops = {"layernorm", norm_param_count, norm_forward, norm_jvp,
                                norm_backward};
