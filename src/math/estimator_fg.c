// fg: g = (1/(N K)) sum d_{b,k} v_{b,k}, the plain forward gradient.
#include "estimator.h"

static int fg_coefficients(const Estimator *e, const float *d, const double *rdots, float *coeff,
                           float *base) {
    (void)rdots;
    int n = e->micro_batches * e->tangents;
    float scale = 1.0f / (float)n;
    for (int i = 0; i < n; i++) coeff[i] = scale * d[i];
    *base = 0.0f;
    return 0;
}

const EstimatorInfo estimator_fg = {.name = "fg", .coefficients = fg_coefficients};
