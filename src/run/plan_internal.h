// What plan.c and plan_costs.c share: a cost set, the op costs of one kind of F (bp's plain
// forward, fg's or fg+bp's with tangents) on every stage, and where the stages are cut.
#ifndef FGPIPE_PLAN_INTERNAL_H
#define FGPIPE_PLAN_INTERNAL_H

#include "mem_account.h"
#include "op_cost.h"
#include "plan.h"
#include "schedule.h"

typedef struct {
    Config cfg;                                 // the config with this set's mode
    int layout[SCHED_MAX_STAGES + 1];           // first layer of each stage, then n_layers
    double costs[N_OP_COSTS * SCHED_MAX_STAGES];// seconds, [kind * M + stage]
    char source[4200];                          // "timed here, ..." or the costs file
    char untimed[320];                          // why this set was not timed ("": it was)
    // Per stage: the sizes its activations are made of (the run's model of them), the bytes of
    // its resident layers by owner, one forward message (with its tangents) and one adjoint
    // message.
    ActivationSizes act[SCHED_MAX_STAGES];
    double resident[SCHED_MAX_STAGES][N_MEM_OWNERS];
    double forward_msg[SCHED_MAX_STAGES], adjoint_msg[SCHED_MAX_STAGES];
} CostSet;

// What one timetable gives each stage.
typedef struct {
    double step, bubble;
    double b_ops[SCHED_MAX_STAGES];        // B or Bw ops per step
    double activations[SCHED_MAX_STAGES];  // bytes at most at once (mem_account.h's categories)
    double memory[N_MEM_OWNERS][SCHED_MAX_STAGES];  // by owner: activations at their peak, the
                                                    // resident layers' buffers
    double sent[SCHED_MAX_STAGES];         // bytes sent per step
} Figures;

// plan --batches (plan_batch.c): for bp-zb, fg and fg+bp (their figures at the config's
// micro-batch), activation memory and the flash bandwidth a streamed stage needs against the
// micro-batch size, and the size each would choose for mem_budget and the disk.
int plan_print_batches(const CostSet *bp, const Figures *bp_fig, const CostSet *fg,
                       const Figures *fg_fig, const CostSet *fg_bp, const Figures *fg_bp_fig,
                       const Model *m, const PlanArgs *a, FILE *out, FgError *err);

// A run's summary.json (path): checks it is of cfg's pipeline (stages, micro-batches,
// replicas), then gives its mode (MODE_*), its layout [M + 1] and its op costs
// [N_OP_COSTS * M] (planned, or measured).
int plan_read_costs(const Config *cfg, const char *path, int measured, int *mode_out, int *layout,
                    double *costs, FgError *err);

#endif
