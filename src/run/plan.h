// fgpipe plan: every schedule's timetable for a config's pipeline (M stages, N micro-batches,
// R replicas) without running it: the planned step time, the bubble, and per stage the B ops,
// the peak stash and the bytes sent per step, for bp-gpipe, bp-1f1b, bp-zb, fg and fg+bp.
//
// The op costs are timed here as a run's start-up times them, one stage at a time (so a laptop
// can plan M = 32), with the stages cut as the run cuts them; or, for the mode a run used,
// read from its summary.json (`op_costs`: what its timetable was planned with, which rebuilds
// that run's timetable exactly; or `measured`, what its ops took as they ran).
#ifndef FGPIPE_PLAN_H
#define FGPIPE_PLAN_H

#include <stdio.h>

#include "backend.h"
#include "common.h"
#include "config.h"

typedef struct {
    const char *costs_path;  // a run's summary.json, or NULL
    int measured;            // take the costs its ops ran at (else those it planned with)
    const char *json_path;   // write every timetable as JSON here, or NULL
    int batches;             // also the micro-batch sweep for mem_budget and the disk
    double disk_bandwidth;   // bytes per second of the flash; 0: measured in weights_dir
    const char *node;        // --node: a node described (plan_node.h), nothing timed; or NULL
    double node_params;      // --params: the model's parameter count instead of its shape
    int node_batch;          // --at: the batch the curves are read at (default 64)
    int frozen_bf16;         // --frozen-bf16: the frozen layers on flash in BF16 (a base
                             // imported from Hugging Face's BF16 keeps it: Layer.stored_bf16)
} PlanArgs;

// Prints the table onto out (and writes the JSON). The config's mode picks nothing: every
// mode is planned, each with the config's other keys.
int plan_print(const Config *cfg, const Backend *be, const PlanArgs *args, FILE *out, FgError *err);

#endif
