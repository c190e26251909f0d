// mix: g = (1 - s) c + s (1/(N K)) sum d_{b,k} v_{b,k}, this step's exact gradient and the
// fresh estimate weighed; biased toward c for s < 1, c itself at s = 0.
#include "estimator.h"

static int mix_coefficients(const Estimator *e, const float *d, const double *rdots, float *coeff,
                            float *base) {
    (void)rdots;
    int n = e->micro_batches * e->tangents;
    float scale = 1.0f / (float)n;
    for (int i = 0; i < n; i++) coeff[i] = e->shrink * scale * d[i];
    *base = 1.0f - e->shrink;
    return 0;
}

const EstimatorInfo estimator_mix = {.name = "mix", .shrinks = 1, .base_is_c = 1,
                                     .coefficients = mix_coefficients};
