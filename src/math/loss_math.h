// Softmax cross-entropy of one row of logits, for the CPU (loss.c) and the GPU
// (cuda/loss_cuda.cu): the same operations in the same order on both (expf and log from each
// side's own libm), and both sum the rows in order on the host, so the backends differ only
// where their libm does.
#ifndef FGPIPE_LOSS_MATH_H
#define FGPIPE_LOSS_MATH_H

#include <math.h>

#include "host_device.h"

// A row's shift (its largest logit: expf stays finite), the softmax normaliser
// sum_j exp(z_j - zmax) in double, its float reciprocal, and the arg max (first on ties).
typedef struct {
    float zmax, inv;
    double sum;
    int best;
} SoftmaxRow;

// e (when not NULL) keeps each exp(z_j - zmax), so that the gradient need not compute it again.
FG_HD SoftmaxRow fg_softmax_row_keep(const float *z, int C, float *e) {
    SoftmaxRow s = {z[0], 0.0f, 0.0, 0};
    for (int j = 1; j < C; j++) {
        s.zmax = z[j] > s.zmax ? z[j] : s.zmax;
        s.best = z[j] > z[s.best] ? j : s.best;
    }
    for (int j = 0; j < C; j++) {
        float ej = expf(z[j] - s.zmax);
        if (e) e[j] = ej;
        s.sum += ej;
    }
    s.inv = (float)(1.0 / s.sum);
    return s;
}

FG_HD SoftmaxRow fg_softmax_row(const float *z, int C) { return fg_softmax_row_keep(z, C, NULL); }

// The row's loss -log p[label], rounded to float before the caller sums the rows in double.
FG_HD float fg_xent_loss(SoftmaxRow s, const float *z, int label) {
    return (float)(log(s.sum) - (z[label] - s.zmax));
}

// d loss / d z_j = p_j - [j == label] (the caller divides by the batch for the mean), from
// e_j = exp(z_j - zmax).
FG_HD float fg_xent_grad_of(SoftmaxRow s, float e_j, int label, int j) {
    float p = e_j * s.inv;
    return j == label ? p - 1.0f : p;
}

FG_HD float fg_xent_grad(SoftmaxRow s, const float *z, int label, int j) {
    return fg_xent_grad_of(s, expf(z[j] - s.zmax), label, j);
}

// The row's directional derivative along zd: sum_j (p_j - [j == label]) zd_j, in double.
FG_HD double fg_xent_jvp(SoftmaxRow s, const float *z, int label, const float *zd, int C) {
    double d = 0.0;
    for (int j = 0; j < C; j++) d += (double)fg_xent_grad(s, z, label, j) * zd[j];
    return d;
}

#endif
