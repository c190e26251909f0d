// cv, the control variate: g = r + s (1/(N K)) sum (d_{b,k} - r.v_{b,k}) v_{b,k}, with r the
// reference (the step before's c), unbiased at s = 1 for any r independent of the tangents.
#include "estimator.h"

#include <stddef.h>

static int cv_coefficients(const Estimator *e, const float *d, const double *rdots, float *coeff,
                           float *base) {
    if (!rdots) return -1;
    int n = e->micro_batches * e->tangents;
    float scale = 1.0f / (float)n;
    for (int i = 0; i < n; i++) coeff[i] = e->shrink * scale * (float)((double)d[i] - rdots[i]);
    *base = 1.0f;
    return 0;
}

const EstimatorInfo estimator_cv = {.name = "cv", .dots_reference = 1, .shrinks = 1,
                                    .drops_exact = 1, .coefficients = cv_coefficients};
