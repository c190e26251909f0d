// RMSNorm of one vector of n features, y = w * (x * r), r = 1 / sqrt(mean(x^2) + eps), as
// Llama's and Qwen3's RMSNorm compute it: the formulas shared by the token norm
// (layer_rmsnorm.c), the per-head q/k norm (layer_qk_norm.c) and the GPU's (cuda/llama_cuda.cu,
// one thread per vector: the CPU's operations in the CPU's order). With xhat = x r:
//   jvp:      ydot = w r (xdot - xhat mean(xhat xdot)) + wdot xhat
//   backward: dx = r (g - xhat mean(g xhat)), g = w dy;  dw += dy xhat
#ifndef FGPIPE_RMS_MATH_H
#define FGPIPE_RMS_MATH_H

#include <math.h>
#include <stddef.h>

#include "host_device.h"

FG_HD float fg_rms_rstd(const float *x, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

FG_HD void fg_rms_forward(const float *x, const float *w, int n, float eps, float *y) {
    float r = fg_rms_rstd(x, n, eps);
    for (int i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

// xd or wd NULL: that tangent is zero.
FG_HD void fg_rms_jvp(const float *x, const float *xd, const float *w, const float *wd,
                              int n, float eps, float *yd) {
    float r = fg_rms_rstd(x, n, eps), mean_hd = 0;
    for (int i = 0; xd && i < n; i++) mean_hd += x[i] * r * xd[i];
    mean_hd /= (float)n;
    for (int i = 0; i < n; i++) {
        float xhat = x[i] * r, v = 0;
        if (xd) v = w[i] * (r * (xd[i] - xhat * mean_hd));
        if (wd) v += wd[i] * xhat;
        yd[i] = v;
    }
}

// dx (+)= the input adjoint (accumulate: add to dx, else write it).
FG_HD void fg_rms_backward_dx(const float *x, const float *w, const float *dy, int n,
                                      float eps, float *dx, int accumulate) {
    float r = fg_rms_rstd(x, n, eps), mean_gh = 0;
    for (int i = 0; i < n; i++) mean_gh += w[i] * dy[i] * (x[i] * r);
    mean_gh /= (float)n;
    for (int i = 0; i < n; i++) {
        float v = r * (w[i] * dy[i] - x[i] * r * mean_gh);
        dx[i] = accumulate ? dx[i] + v : v;
    }
}

// One row's term of dw, and dw += dy xhat over a row, with r = fg_rms_rstd(x, n, eps) given.
FG_HD float fg_rms_dw_term(float x, float dy, float r) { return dy * (x * r); }
FG_HD void fg_rms_backward_dw(const float *x, const float *dy, int n, float r, float *dw) {
    for (int i = 0; i < n; i++) dw[i] += fg_rms_dw_term(x[i], dy[i], r);
}

#endif
