// What pipeline.c (the step driver) defines for pipeline_setup.c and op_timing.c above it: the
// calibration's forward-only steps, op costs from the step's times, and the reference's state
// after a load.
#ifndef FGPIPE_PIPELINE_INTERNAL_H
#define FGPIPE_PIPELINE_INTERNAL_H

#include "engine_state.h"

// Calibration: `steps` steps of the timetable's F ops alone (no B, no update), every stage at
// once, on the first samples of the data; *f_seconds: this stage's F, the median over the
// steps after the first (a warm-up) of each step's median.
int pipeline_time_forward(Pipeline *p, int steps, double *f_seconds, FgError *err);

// Op costs (op_cost.h's kinds) from the seconds of this stage's ops by OpKind (< 0: none ran,
// planned costs stand in): a whole B split into Bi and Bw in the planned ratio, a Bw that redoes
// Bi (recompute) less Bi's time (at least a third of it).
void pipeline_costs_of_kinds(const Pipeline *p, const double seconds[OP_U + 1], double cost[N_OP_COSTS]);

// ref_active from the reference's values (after a load): one sum over the stages.
int pipeline_refresh_ref(Pipeline *p, FgError *err);

#endif
