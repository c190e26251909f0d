#include "estimator.h"

#include <stddef.h>

int estimator_coefficients(const Estimator *e, const float *d, const double *cdots, float *coeff,
                           float *base) {
    int n = e->micro_batches * e->tangents;
    float scale = 1.0f / (float)n;
    switch (e->kind) {
    case EST_FG:
        for (int i = 0; i < n; i++) coeff[i] = scale * d[i];
        *base = 0.0f;
        return 0;
    case EST_CV:
        if (!cdots) return -1;
        for (int i = 0; i < n; i++) coeff[i] = scale * (float)((double)d[i] - cdots[i]);
        *base = 1.0f;
        return 0;
    case EST_GUIDED:
        break;
    }
    return -1;
}
