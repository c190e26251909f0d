// The fused head's row formulas (head_loss.h), for the CPU (head_loss.c) and the GPU
// (cuda/head_cuda.cu): a row's running softmax over blocks of logits, and its record.
#ifndef FGPIPE_HEAD_MATH_H
#define FGPIPE_HEAD_MATH_H

#include <math.h>

#include "host_device.h"
#include "loss_math.h"

// A row's running softmax over the blocks so far: its largest logit (first on ties), the sum
// of exp(z_j - zmax) rescaled whenever zmax grows, and the label's logit once seen.
typedef struct {
    float zmax, zlabel;
    double sum;
    int best;
} RunningRow;

// Block [j0, j0 + nb) of the row's logits z into s (j0 = 0 starts it). With one block this is
// fg_softmax_row_keep's arithmetic, operation for operation.
FG_HD void fg_head_running(RunningRow *s, const float *z, int j0, int nb, int label) {
    int bbest = 0;
    for (int j = 1; j < nb; j++) bbest = z[j] > z[bbest] ? j : bbest;
    if (j0 == 0) {
        s->zmax = z[bbest], s->zlabel = 0.0f, s->sum = 0.0, s->best = bbest;
    } else if (z[bbest] > s->zmax) {
        s->sum *= exp((double)s->zmax - (double)z[bbest]);
        s->zmax = z[bbest];
        s->best = j0 + bbest;
    }
    for (int j = 0; j < nb; j++) s->sum += expf(z[j] - s->zmax);
    if (label >= j0 && label < j0 + nb) s->zlabel = z[label - j0];
}

// The row's record {label, zmax, inv, weight} (head_loss.h); returns its loss (fg_xent_loss's
// value), *hit whether its arg max is the label.
FG_HD float fg_head_record(const RunningRow *s, int label, float weight, float *q, int *hit) {
    float inv = (float)(1.0 / s->sum);
    q[0] = (float)label, q[1] = s->zmax, q[2] = inv, q[3] = weight;
    *hit = s->best == label;
    return (float)(log(s->sum) - (s->zlabel - s->zmax));
}

// A record as loss_math.h's row (the sum is not needed past the first pass) and its label.
FG_HD SoftmaxRow fg_head_row(const float *q, int *label) {
    *label = (int)q[0];
    SoftmaxRow s = {q[1], q[2], 0.0, 0};
    return s;
}

// dz_j of column j of the block starting at j0: (p_j - [j == label]) / rows * weight.
FG_HD float fg_head_adjoint(const float *q, float z_j, int j0, int j, int rows) {
    int label;
    SoftmaxRow s = fg_head_row(q, &label);
    return fg_xent_grad_of(s, expf(z_j - s.zmax), label - j0, j) / rows * q[3];
}

// The row's directional derivative carried on over block [j0, j0 + nb): acc + sum_j (p_j -
// [j == label]) zd_j, fg_xent_jvp's sum in column order.
FG_HD double fg_head_jvp_block(const float *q, const float *z, const float *zd, int j0, int nb,
                               double acc) {
    int label;
    SoftmaxRow s = fg_head_row(q, &label);
    for (int j = 0; j < nb; j++) acc += (double)fg_xent_grad(s, z, label - j0, j) * zd[j];
    return acc;
}

// The JVP in one pass over more than one block (an online softmax's derivative): S_k = sum_j
// exp(z_j - zmax) zd_k,j over the blocks so far, rescaled with the running sum whenever zmax
// grows, and zl_k = zd_k,label once seen; the row's derivative along tangent k is then
// S_k / sum - zl_k (fg_head_online_d). Called after fg_head_running on the same block, with the
// zmax from before it (old_zmax); S and zl hold K values `stride` apart, zd K blocks zd_stride
// apart.
FG_HD void fg_head_running_jvp(const RunningRow *s, float old_zmax, double *S, float *zl,
                               size_t stride, int K, const float *z, const float *zd,
                               size_t zd_stride, int j0, int nb, int label) {
    double rescale = j0 > 0 && s->zmax > old_zmax ? exp((double)old_zmax - (double)s->zmax) : 1.0;
    for (int k = 0; k < K; k++) {
        const float *zk = zd + k * zd_stride;
        double acc = j0 > 0 ? S[k * stride] * rescale : 0.0;
        for (int j = 0; j < nb; j++) acc += (double)expf(z[j] - s->zmax) * zk[j];
        S[k * stride] = acc;
        if (label >= j0 && label < j0 + nb) zl[k * stride] = zk[label - j0];
    }
}

FG_HD double fg_head_online_d(const RunningRow *s, double S, float zl) {
    return S / s->sum - (double)zl;
}

// The directional derivatives d from the rows' own, row_d [K, rows] (host memory): each
// tangent's mean over the rows, or with per_row (activity tangents) the rows' own.
static inline void fg_head_derivatives(const double *row_d, int rows, int K, int per_row, float *d) {
    for (int k = 0; k < K; k++) {
        double sum = 0.0;
        for (int r = 0; r < rows; r++) {
            sum += row_d[(size_t)k * rows + r];
            if (per_row) d[(size_t)k * rows + r] = (float)row_d[(size_t)k * rows + r];
        }
        if (!per_row) d[k] = (float)(sum / rows);
    }
}

#endif
