// Rotary position embedding of q and k (Llama, Qwen3), rotate-half convention: in each head
// of d features, feature i < d/2 pairs with i + d/2 and the pair turns by angle t f_i at
// position t:  y_i = x_i cos - x_{i+d/2} sin,  y_{i+d/2} = x_{i+d/2} cos + x_i sin.
// f_i = theta^(-2i/d), with Llama 3's rope_scaling when factor > 0 (transformers'
// _compute_llama3_parameters): wavelengths 2 pi / f_i beyond original / low are divided by
// factor, those below original / high kept, those between blended. A token is [x, q, k, v]
// (qkv_shape.h); x and v pass through. No parameters; the op is linear in q and k, so jvp
// rotates the tangents and backward rotates the adjoints back. Angles are computed in double,
// their cos and sin rounded to float once.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qkv_shape.h"

static size_t rope_param_count(const Layer *L) {
    (void)L;
    return 0;
}

static double rope_frequency(const RopeParams *rp, int i, int d) {
    double f = pow((double)rp->theta, -2.0 * i / d);
    if (rp->factor <= 0) return f;
    double wavelen = 2.0 * 3.14159265358979323846 / f, low_wavelen = rp->original / (double)rp->low,
           high_wavelen = rp->original / (double)rp->high;
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / rp->factor;
    double smooth = (rp->original / wavelen - rp->low) / ((double)rp->high - rp->low);
    return (1.0 - smooth) * f / rp->factor + smooth * f;
}

float *rope_table(const Layer *L, int T, int d) {
    int half = d / 2;
    float *cs = malloc((size_t)T * half * 2 * sizeof(float));
    for (int i = 0; i < half; i++) {
        double f = rope_frequency(&L->rope, i, d);
        for (int t = 0; t < T; t++) {
            cs[((size_t)t * half + i) * 2] = (float)cos(t * f);
            cs[((size_t)t * half + i) * 2 + 1] = (float)sin(t * f);
        }
    }
    return cs;
}

// y's q and k heads = x's rotated by +angle (sign 1) or -angle (sign -1: the transpose), over
// n tokens of position r mod T.
static void rotate(const QkvShape *s, const float *cs, const float *x, float *y, size_t n,
                   float sign) {
    int half = s->d / 2;
#pragma omp parallel for if (n * s->width > 65536)
    for (size_t r = 0; r < n; r++) {
        const float *c = cs + (r % (size_t)s->T) * half * 2;  // position r mod T
        for (int j = 0; j < s->H + s->Hkv; j++) {
            size_t at = r * s->width + qkv_head_at(s, j);
            const float *a = x + at;
            float *b = y + at;
            for (int i = 0; i < half; i++) {
                rope_turn(a[i], a[i + half], c[2 * i], sign * c[2 * i + 1], &b[i], &b[i + half]);
            }
        }
    }
}

static void rope_apply(const Layer *L, const float *x, float *y, size_t blocks, int B, float sign) {
    QkvShape s = qkv_shape(L, B);
    float *cs = rope_table(L, s.T, s.d);
    qkv_copy_rest(&s, blocks * s.rows, x, y);
    rotate(&s, cs, x, y, blocks * s.rows, sign);
    free(cs);
}

static void rope_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    (void)p;
    rope_apply(L, x, y, 1, B, 1.0f);
}

static void rope_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                     const float *xdot, float *y, float *ydot, int B, int K) {
    (void)pdot;
    rope_forward(L, p, x, y, B);
    if (xdot) rope_apply(L, xdot, ydot, (size_t)K, B, 1.0f);
    else memset(ydot, 0, (size_t)K * B * L->out * sizeof(float));
}

static void rope_backward(const Layer *L, const float *p, const float *x, const float *dy,
                          float *dx, float *dp, int B) {
    (void)p, (void)x, (void)dp;
    if (dx) rope_apply(L, dy, dx, 1, B, -1.0f);
}

const LayerOps rope_ops = {"rope", rope_param_count, rope_forward, rope_jvp, rope_backward};
