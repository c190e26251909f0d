// Where a stage's layers live, decided once at setup, before anything is allocated: resident
// (every buffer in memory) when everything fits mem_budget with the runtime, or there is none,
// and stream is 0; else streamed from weights_dir through a few slots (layer_source.h). What
// each needs in memory is modelled here (mem_account.h) for the choice, for fgpipe plan and for
// the streamed source's budget; the step never asks which it is (update_plan.c, LayerSource).
#ifndef FGPIPE_SOURCE_PLAN_H
#define FGPIPE_SOURCE_PLAN_H

#include "engine_state.h"

// Sets *streams_here (this stage streams), p->n_streamed (stages of the pipeline that do: one
// sum over the stages, before any store opens) and p->layer_major; refuses what the choice
// cannot run (a resume without every stage streamed, grad_delay out of core, a build that
// cannot stream, a resident stage larger than the machine).
int source_choose(Pipeline *p, const LayerStreams *streams, int *streams_here, FgError *err);
// What a streamed stage holds besides its slots (its source's work_bytes).
double source_streamed_needs_bytes(const Pipeline *p);
// A streamed stage's op costs for the timetable: its GEMM work at a nominal 10 GFLOP/s (timing
// would read the whole store), for n parameters and K tangents, into cost[i * stride].
void source_nominal_costs(const Config *c, double n, int K, double *cost, int stride);
// A streamed stage's timetable is built before its source opens and never calibrated: the
// stashes and kept adjoints stage `stage` of S holds at once, run layer-major, replace
// run_plan's estimate in p->run (fg+bp on one stage keeps none: no bubble to fill).
void source_streamed_in_flight(Pipeline *p, const Schedule *S, int stage);
// The row blocks of the stage's first layer whose reads ahead into the next step follow that
// step's ids (Pipeline tt.ends.wrap_blocks): those of a frozen table streamed on stage 0 of a text,
// whose forward reads the blocks of its ids alone; 0: the read-ahead starts at block 0.
int source_wrap_blocks(const Pipeline *p);

#endif
