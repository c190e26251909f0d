// RMSNorm over each token's C features (Llama's input_layernorm, post_attention_layernorm and
// final norm): y = w * x / sqrt(mean(x^2) + eps), weight w [C], no bias (rms_math.h). With
// carry (= C, a block's norms) the output keeps the token ahead of the normalised copy,
// [x, RMS(x)], as LayerNorm does (layer.h).
#include <string.h>

#include "layer.h"
#include "rms_math.h"

static size_t rmsnorm_param_count(const Layer *L) { return (size_t)layer_in_token(L); }

typedef struct {
    size_t rows;
    int C, out, offset;  // features, output floats per token, where RMS(x) starts in it
} RmsShape;

static RmsShape rms_shape(const Layer *L, int B) {
    RmsShape s = {(size_t)B * layer_tokens(L), layer_in_token(L), layer_out_token(L),
                  L->carry ? layer_in_token(L) : 0};
    return s;
}

static void rmsnorm_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    RmsShape s = rms_shape(L, B);
#pragma omp parallel for if (s.rows * s.C > 65536)
    for (size_t r = 0; r < s.rows; r++) {
        const float *xr = x + r * s.C;
        float *yr = y + r * s.out;
        if (s.offset) memcpy(yr, xr, (size_t)s.C * sizeof(float));
        fg_rms_forward(xr, p, s.C, L->eps, yr + s.offset);
    }
}

static void rmsnorm_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                        const float *xdot, float *y, float *ydot, int B, int K) {
    RmsShape s = rms_shape(L, B);
    size_t in_block = s.rows * s.C, block = s.rows * s.out;
    rmsnorm_forward(L, p, x, y, B);
#pragma omp parallel for collapse(2) if (K * in_block > 65536)
    for (int k = 0; k < K; k++) {
        for (size_t r = 0; r < s.rows; r++) {
            const float *xd = xdot ? xdot + k * in_block + r * s.C : NULL;
            float *yd = ydot + k * block + r * s.out;
            if (s.offset && xd) memcpy(yd, xd, (size_t)s.C * sizeof(float));
            else if (s.offset) memset(yd, 0, (size_t)s.C * sizeof(float));
            fg_rms_jvp(x + r * s.C, xd, p, pdot ? pdot + k * L->param_count : NULL, s.C, L->eps,
                       yd + s.offset);
        }
    }
}

// dx = [dy's carry +] the norm's adjoint; dw += dy_norm xhat over the rows in order.
static void rmsnorm_backward(const Layer *L, const float *p, const float *x, const float *dy,
                             float *dx, float *dp, int B) {
    RmsShape s = rms_shape(L, B);
    if (dx) {
#pragma omp parallel for if (s.rows * s.C > 65536)
        for (size_t r = 0; r < s.rows; r++) {
            const float *dyr = dy + r * s.out;
            float *dxr = dx + r * s.C;
            if (s.offset) memcpy(dxr, dyr, (size_t)s.C * sizeof(float));
            fg_rms_backward_dx(x + r * s.C, p, dyr + s.offset, s.C, L->eps, dxr, s.offset != 0);
        }
    }
    for (size_t r = 0; dp && r < s.rows; r++)
        fg_rms_backward_dw(x + r * s.C, dy + r * s.out + s.offset, s.C,
                           fg_rms_rstd(x + r * s.C, s.C, L->eps), dp);
}

const LayerOps rmsnorm_ops = {"rmsnorm", rmsnorm_param_count, rmsnorm_forward, rmsnorm_jvp,
                              rmsnorm_backward};
