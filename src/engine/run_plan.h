// What a run does, resolved once from its Config: the engine reads these fields instead of
// re-deriving them from the options (which estimator `auto` means, whether F dots a reference,
// how many directional derivatives a micro-batch has, ...). Pure: no MPI, no buffers.
#ifndef FGPIPE_RUN_PLAN_H
#define FGPIPE_RUN_PLAN_H

#include "config.h"
#include "estimator.h"
#include "perturbation.h"

typedef struct {
    int tangents;            // K per micro-batch; 0 in bp and where fg weighs 0 (no tangents)
    int forms_estimate;      // op U forms an estimate (fg, fg+bp); bp applies its gradient
    int all_microbatches;    // R * N: the step's over every replica (they name the tangents)
    int saves_inputs;        // F keeps layer inputs for U (activity, local losses): each
                             // replica forms the estimate of its own micro-batches
    int d_per_sample;        // F's directional derivatives are per sample (activity)
    int sends_tangents;      // F's messages carry tangents (not with local losses)
    int d_per_microbatch;    // directional derivatives per micro-batch: K, or K per sample
    EstimatorKind estimator; // how op U weighs the derivatives (fg and fg+bp)
    float shrink;            // the estimator's weight of its noisy term (1 for fg, guided)
    int dots_reference;      // F dots a reference (the step before's c) with its tangents
    int guided;              // tangent 0 follows the reference (estimator guided)
    int exact_in_step;       // micro-batches 0..exact_in_step-1 of each replica are exact in
                             // this step's c (an explicit select at lag 0): not estimated
    int grad_delay;          // bp: steps a gradient waits before its update
    int recompute;           // F keeps the stage's input alone, B (or Bi) reruns F from it
                             // (recompute = stage in a mode with B ops)
} RunPlan;

// The plan of cfg's run with `replicas` data-parallel pipelines.
RunPlan run_plan(const Config *cfg, int replicas);

// Whether micro-batch mb of a replica is inside this step's c (its estimate is left out).
static inline int run_plan_exact(const RunPlan *r, int mb) { return mb < r->exact_in_step; }

#endif
