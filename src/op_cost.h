// What a stage's ops cost on this machine, timed: the timetable is planned with these, and the
// model is cut into stages of equal work with them.
#ifndef FGPIPE_OP_COST_H
#define FGPIPE_OP_COST_H

#include <stdint.h>

#include "stage.h"
#include "transport.h"

enum { COST_F, COST_BI, COST_BW, COST_U, N_OP_COSTS };

// Seconds of one op F, Bi and Bw on a micro-batch of `rows`, and of U (regenerating and adding
// the tangents of n_mb micro-batches; 0 without tangents), best of three. with_xdot: F
// receives an input tangent (every stage but the first). Values do not change the cost, so
// the buffers are zeros.
int stage_measure_costs(Stage *st, int rows, int with_xdot, int n_mb, uint32_t seed,
                        double cost[N_OP_COSTS], FgError *err);

// The same for every layer of the model on its own: cost[l * N_OP_COSTS + i]. Only layer 0
// runs without an input tangent, as it does in any pipeline. K tangents as in stage_init.
int model_measure_layer_costs(const Backend *be, const Model *m, int rows, int K, int n_mb,
                              uint32_t seed, double *cost, FgError *err);

// Runs measure(arg) on one rank of the world at a time while the others wait in a collective:
// where ranks share cores, timings taken at once would measure the contention, not the ops.
int measure_in_turns(Transport *t, int (*measure)(void *arg, FgError *err), void *arg,
                     FgError *err);

#endif
