// LayerNorm's shape and element formulas, for the CPU (layer_norm.c) and the GPU
// (cuda/sequence_cuda.cu): the same float operations on both; only the row sums (mean,
// variance, the jvp's and backward's means) are added in another order on the GPU.
#ifndef FGPIPE_NORM_MATH_H
#define FGPIPE_NORM_MATH_H

#include <math.h>

#include "host_device.h"
#include "layer.h"

#define FG_LN_EPS 1e-5f

typedef struct {
    int rows, C, out;  // tokens, features per token, output floats per token
    int offset;        // where LN(x) starts in an output token (C with carry, else 0)
} NormShape;

static inline NormShape norm_shape(const Layer *L, int B) {
    NormShape s = {B * layer_tokens(L), layer_in_token(L), layer_out_token(L),
                   L->carry ? layer_in_token(L) : 0};
    return s;
}

// rstd from the sum of squared deviations over C features.
FG_HD float fg_norm_rstd(float var_sum, int C) { return 1.0f / sqrtf(var_sum / (float)C + FG_LN_EPS); }
FG_HD float fg_norm_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }
// The tangent of one normalised feature's gamma * xhat: gamma rstd ((xd - mean(xd)) - xhat mean(xhat xd)).
FG_HD float fg_norm_jvp(float gamma, float rstd, float xd, float mean_d, float xhat, float mean_hd) {
    return gamma * (rstd * ((xd - mean_d) - xhat * mean_hd));
}
// The input adjoint of one feature, g = gamma dy: rstd (g - mean(g) - xhat mean(g xhat)).
FG_HD float fg_norm_dx(float rstd, float g, float mean_g, float xhat, float mean_gh) {
    return rstd * (g - mean_g - xhat * mean_gh);
}

#endif
