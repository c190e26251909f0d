// Gradient estimators of docs/design.md section 4, reduced to scalars.
//
// Every estimator has the form  g = base * r + sum_{b,k} coeff[b*K+k] * v_{b,k}
// where r is a reference vector (cv: the exact gradient c from backprop on selected
// micro-batches; guided: the unit direction c/|c|), v_{b,k} are the regenerated tangents and
// d_{b,k} = grad(loss_b) . v_{b,k} come from the forward pass.
// Only these scalars cross pipeline stages; the d-sized sums happen locally on each stage.
#ifndef FGPIPE_ESTIMATOR_H
#define FGPIPE_ESTIMATOR_H

// One enum for the config's choice and the estimate: EST_AUTO exists only in a Config (the run
// plan resolves it: cv for weight perturbation, mix for activity).
typedef enum {
    EST_AUTO,
    EST_FG,      // g = (1/(N K)) sum d_{b,k} v_{b,k}
    EST_CV,      // g = c + (1/(N K)) sum (d_{b,k} - c.v_{b,k}) v_{b,k}   (control variate)
    EST_GUIDED,  // tangent k=0 of every micro-batch is u = c/|c| (from the previous step), so
                 // d_{b,0} = grad(loss_b) . u exactly; the K-1 random tangents estimate the rest
                 // of the gradient, projected off u:
                 // g = (1/N) sum_b [d_{b,0} u + 1/(K-1) sum_{k>0} d_{b,k} (v_{b,k} - (u.v_{b,k}) u)]
    EST_MIX,     // g = (1 - s) c + s (1/(N K)) sum d_{b,k} v_{b,k}: the step's exact gradient
                 // (as old as its ops' lag, partial when select < N) and the fresh estimate,
                 // weighted; biased toward c for s < 1, and c itself for s = 0
} EstimatorKind;

typedef struct {
    EstimatorKind kind;
    int micro_batches;  // N
    int tangents;       // K
    float shrink;       // s: the weight of the step's own noisy term (cv: of the residual
                        // sum (d - r.v) v, biased for s < 1; mix: above); 1 for fg and guided
} Estimator;

// What the engine needs to know of an estimator, one row per kind (estimator.c's table; each
// kind's file defines its row): how op F and op U treat it, and its coefficients.
typedef struct {
    const char *name;
    int dots_reference;   // op F dots the reference (the step before's c) with the tangents
    int shrinks;          // `shrink` weighs its noisy term (else s = 1)
    int base_is_c;        // its base term weighs this step's c (else the reference)
    int drops_exact;      // micro-batches exact in this step's c leave its sum (cv at lag 0)
    int guides;           // tangent 0 of each micro-batch is the unit reference (op F)
    // Fills coeff[N*K] and *base from d[N*K] and, where dots_reference, rdots[N*K] = r . v_{b,k}.
    // Returns 0, or -1 when rdots is missing.
    int (*coefficients)(const Estimator *e, const float *d, const double *rdots, float *coeff,
                        float *base);
} EstimatorInfo;

// The row of `kind`; NULL for EST_AUTO (a choice the run plan resolves, not an estimator).
const EstimatorInfo *estimator_info(EstimatorKind kind);

// estimator_info(e->kind)->coefficients, or -1 for EST_AUTO.
int estimator_coefficients(const Estimator *e, const float *d, const double *rdots, float *coeff,
                           float *base);

#endif
