// Qwen3's q and k norms: RMSNorm over each head's d features of q (weight q_norm [d]) and of k
// (weight k_norm [d]), before the rotary embedding. A token is [x, q, k, v] in and out
// (qkv_shape.h); x and v pass through. Parameters: q_norm then k_norm.
#include <string.h>

#include "qkv_shape.h"
#include "rms_math.h"

static size_t qknorm_param_count(const Layer *L) { return 2 * (size_t)layer_head_dim(L); }

void qkv_copy_rest(const QkvShape *s, size_t n, const float *from, float *to) {
    size_t v_at = (size_t)qkv_head_at(s, s->H + s->Hkv);
    for (size_t r = 0; r < n; r++) {
        memcpy(to + r * s->width, from + r * s->width, (size_t)s->C * sizeof(float));
        memcpy(to + r * s->width + v_at, from + r * s->width + v_at,
               (s->width - v_at) * sizeof(float));
    }
}

// Where head j's weight starts in the parameters: q_norm for query heads, k_norm for kv heads.
static size_t weight_at(const QkvShape *s, int j) { return j < s->H ? 0 : (size_t)s->d; }

static void qknorm_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    QkvShape s = qkv_shape(L, B);
    qkv_copy_rest(&s, s.rows, x, y);
#pragma omp parallel for if (s.rows * s.width > 65536)
    for (size_t r = 0; r < s.rows; r++)
        for (int j = 0; j < s.H + s.Hkv; j++) {
            size_t at = r * s.width + qkv_head_at(&s, j);
            fg_rms_forward(x + at, p + weight_at(&s, j), s.d, L->eps, y + at);
        }
}

static void qknorm_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                       const float *xdot, float *y, float *ydot, int B, int K) {
    QkvShape s = qkv_shape(L, B);
    size_t block = s.rows * s.width;
    qknorm_forward(L, p, x, y, B);
    if (xdot) qkv_copy_rest(&s, K * s.rows, xdot, ydot);
    else memset(ydot, 0, K * block * sizeof(float));
#pragma omp parallel for collapse(2) if (K * block > 65536)
    for (int k = 0; k < K; k++)
        for (size_t r = 0; r < s.rows; r++)
            for (int j = 0; j < s.H + s.Hkv; j++) {
                size_t at = r * s.width + qkv_head_at(&s, j);
                const float *pd = pdot ? pdot + k * L->param_count : NULL;
                fg_rms_jvp(x + at, xdot ? xdot + k * block + at : NULL, p + weight_at(&s, j),
                           pd ? pd + weight_at(&s, j) : NULL, s.d, L->eps, ydot + k * block + at);
            }
}

static void qknorm_backward(const Layer *L, const float *p, const float *x, const float *dy,
                            float *dx, float *dp, int B) {
    QkvShape s = qkv_shape(L, B);
    if (dx) {
        qkv_copy_rest(&s, s.rows, dy, dx);
#pragma omp parallel for if (s.rows * s.width > 65536)
        for (size_t r = 0; r < s.rows; r++)
            for (int j = 0; j < s.H + s.Hkv; j++) {
                size_t at = r * s.width + qkv_head_at(&s, j);
                fg_rms_backward_dx(x + at, p + weight_at(&s, j), dy + at, s.d, L->eps, dx + at, 0);
            }
    }
    for (size_t r = 0; dp && r < s.rows; r++)  // in order: reproducible sums
        for (int j = 0; j < s.H + s.Hkv; j++) {
            size_t at = r * s.width + qkv_head_at(&s, j);
            fg_rms_backward_dw(x + at, dy + at, s.d, fg_rms_rstd(x + at, s.d, L->eps),
                               dp + weight_at(&s, j));
        }
}

const LayerOps qknorm_ops = {"qknorm", qknorm_param_count, qknorm_forward, qknorm_jvp,
                             qknorm_backward};
