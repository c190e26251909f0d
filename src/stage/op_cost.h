// What ops cost on this machine: the kinds of op the timetable is planned with, and the
// per-layer timing the model is cut into stages of equal work with.
#ifndef FGPIPE_OP_COST_H
#define FGPIPE_OP_COST_H

#include <stdint.h>

#include "optimizer.h"
#include "stage.h"
#include "transport.h"

// COST_ZERO: clearing the stage's gradient, which the step's first Bw (or B) op does.
enum { COST_F, COST_BI, COST_BW, COST_U, COST_ZERO, N_OP_COSTS };
// Their keys in summary.json's "op_costs" and fgpipe plan's JSON: "f", "bi", "bw", "u", "zero".
extern const char *const op_cost_keys[N_OP_COSTS];

// How the ops to time run: as in the pipeline, so that the plan's costs are the step's.
typedef struct {
    int rows;        // of a micro-batch
    int with_xdot;   // F receives an input tangent (every stage but the first)
    int with_ref;    // F dots the estimator's reference with its tangents (fg+bp's cv, guided)
    int n_mb;        // micro-batches whose tangents U adds (config_update_microbatches)
    uint32_t seed;
    Perturbation perturb;  // model_measure_layer_costs: its stages' (stage_measure_costs
    int tangent_rank;      // takes the stage's own)
    int local_groups;      // model_measure_layer_costs: local losses, so no layer receives a
                           // tangent (with_xdot is 0 for all)
    const OptimizerConfig *optimizer;  // U steps it over the parameters (NULL: U is the
                                       // tangents' part alone)
    int lagged_weights;    // Bi reads a weight version of its own (the timetable's B ops lag)
    int reruns;            // plain forwards Bi runs first: 1 where F keeps the stage's input
                           // alone (recompute = stage; a split Bw redoes that and Bi, planned
                           // as cost_bi + cost_bw), else 0
    int best;              // the fastest of the rounds, not their median: the cut into stages
                           // compares layers, and other jobs' load only ever adds time
} CostSetup;

// The costs of every layer of the model on its own, for the cut into stages of equal work
// (before any stage exists; a stage's own ops are timed through the engine's step, op_timing.h):
// seconds of one op F, Bi and Bw on a micro-batch, of U (regenerating and adding the tangents
// of every micro-batch, or with activity perturbation forming the estimate from their saved
// inputs, then the optimizer's step) and of clearing the gradient, the median of five (the
// fastest with setup->best), into cost[l * N_OP_COSTS + i]. Values do not change the cost, so
// the buffers are zeros. Only layer 0
// runs without an input tangent, as it does in any pipeline (setup->with_xdot is ignored), or
// every layer with local losses.
// K tangents as in stage_init.
int model_measure_layer_costs(const Backend *be, const Model *m, int K, const CostSetup *setup,
                              double *cost, FgError *err);

// Runs measure(arg) on one rank of the world at a time while the others wait in a collective:
// where ranks share cores, timings taken at once would measure the contention, not the ops.
int measure_in_turns(Transport *t, int (*measure)(void *arg, FgError *err), void *arg,
                     FgError *err);

#endif
