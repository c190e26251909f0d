// guided: tangent 0 of every micro-batch is u = r/|r| (r the step before's c), so d_{b,0} is
// the exact projection of grad(loss_b) on u; the K-1 random tangents estimate the rest,
// projected off u:  g = (1/N) sum_b [d_{b,0} u + 1/(K-1) sum_{k>0} d_{b,k} (v_{b,k} - (u.v_{b,k}) u)].
#include "estimator.h"

#include <stddef.h>

static int guided_coefficients(const Estimator *e, const float *d, const double *rdots,
                               float *coeff, float *base) {
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

const EstimatorInfo estimator_guided = {.name = "guided", .dots_reference = 1, .guides = 1,
                                        .coefficients = guided_coefficients};
