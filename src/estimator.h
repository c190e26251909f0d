// Gradient estimators of DESIGN.md section 4, reduced to scalars.
//
// Every estimator has the form  g = base * c + sum_{b,k} coeff[b*K+k] * v_{b,k}
// where c is an exact gradient (from backprop on selected micro-batches), v_{b,k} are the
// regenerated tangents and d_{b,k} = grad(loss_b) . v_{b,k} come from the forward pass.
// Only these scalars cross pipeline stages; the d-sized sums happen locally on each stage.
#ifndef FGPIPE_ESTIMATOR_H
#define FGPIPE_ESTIMATOR_H

typedef enum {
    EST_FG,      // g = (1/(N K)) sum d_{b,k} v_{b,k}
    EST_CV,      // g = c + (1/(N K)) sum (d_{b,k} - c.v_{b,k}) v_{b,k}   (control variate)
    EST_GUIDED,  // one tangent per micro-batch is c/|c|; needs tangents built from c
} EstimatorKind;

typedef struct {
    EstimatorKind kind;
    int micro_batches;  // N
    int tangents;       // K
} Estimator;

// Fills coeff[N*K] and *base from d[N*K] and, for EST_CV, cdots[N*K] = c . v_{b,k}
// (NULL otherwise). Returns 0, or -1 for a kind this function cannot reduce to scalars
// (EST_GUIDED changes the tangents themselves).
int estimator_coefficients(const Estimator *e, const float *d, const double *cdots, float *coeff,
                           float *base);

#endif
