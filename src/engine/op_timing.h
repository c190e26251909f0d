// The start-up's timing of a stage's ops through the engine's own step (op_timing.c).
#ifndef FGPIPE_OP_TIMING_H
#define FGPIPE_OP_TIMING_H

#include "engine_state.h"

// The costs of stage `stage`'s ops (op_cost.h's kinds) in the pipeline of layout `first`
// (`stages` stages, `replicas` replicas) as cfg runs it with its layers resident: the median
// seconds of each kind of op over a few steps of a throwaway copy of the stage, run alone
// (its neighbours made up: transport_timing), each kind's first op left out (a warm-up). A kind the run never runs costs
// 0 (fg's Bi and Bw); a whole B is split into Bi and Bw evenly (the timetable needs their sum).
// A StageTimer (engine_state.h): what the run gives pipeline_init.
int pipeline_time_ops(const Backend *be, const Config *cfg, const Model *m, const int *first,
                      int stage, int stages, int replica, int replicas, double cost[N_OP_COSTS],
                      FgError *err);

#endif
