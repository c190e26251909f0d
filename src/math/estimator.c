// The estimators' table: adding one is its own file (estimator_<name>.c, defining its row),
// its line here, its EstimatorKind and its config choice.
#include "estimator.h"

#include <stddef.h>

extern const EstimatorInfo estimator_fg, estimator_cv, estimator_guided, estimator_mix;

const EstimatorInfo *estimator_info(EstimatorKind kind) {
    switch (kind) {
    case EST_FG: return &estimator_fg;
    case EST_CV: return &estimator_cv;
    case EST_GUIDED: return &estimator_guided;
    case EST_MIX: return &estimator_mix;
    case EST_AUTO: break;
    }
    return NULL;
}

int estimator_coefficients(const Estimator *e, const float *d, const double *rdots, float *coeff,
                           float *base) {
    const EstimatorInfo *info = estimator_info(e->kind);
    return info ? info->coefficients(e, d, rdots, coeff, base) : -1;
}
