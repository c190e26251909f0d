#include "estimator.h"

#include <stddef.h>

int estimator_coefficients(const Estimator *e, const float *d, const double *rdots, float *coeff,
                           float *base) {
    int n = e->micro_batches * e->tangents;
    float scale = 1.0f / (float)n;
    switch (e->kind) {
    case EST_AUTO:  // a choice, not an estimate: the run plan resolves it
        return -1;
    case EST_FG:
        for (int i = 0; i < n; i++) coeff[i] = scale * d[i];
        *base = 0.0f;
        return 0;
    case EST_CV:
        if (!rdots) return -1;
        for (int i = 0; i < n; i++) coeff[i] = e->shrink * scale * (float)((double)d[i] - rdots[i]);
        *base = 1.0f;
        return 0;
    case EST_MIX:
        for (int i = 0; i < n; i++) coeff[i] = e->shrink * scale * d[i];
        *base = 1.0f - e->shrink;
        return 0;
    case EST_GUIDED: {
        if (!rdots) return -1;
        int N = e->micro_batches, K = e->tangents;
        double along = 0.0;  // coefficient of u
        for (int b = 0; b < N; b++) {
            along += d[b * K];
            coeff[b * K] = 0.0f;
            for (int k = 1; k < K; k++) {
                double beta = (double)d[b * K + k] / (K - 1);
                coeff[b * K + k] = (float)(beta / N);
                along -= beta * rdots[b * K + k];
            }
        }
        *base = (float)(along / N);
        return 0;
    }
    }
    return -1;
}
