// Pipeline schedule builder (docs/design.md section 7): the timetable of one training iteration,
// for every stage the ordered list of its ops with planned start and end times, built
// deterministically from per-stage op costs. No MPI here: the runtime executes the timetable,
// and both the planned and the measured timelines can be exported as Chrome trace JSON.
//
// Ops: F(s,b) forward of micro-batch b on stage s (with tangents in the fg modes), B(s,b) its
// backward (VJP), U(s) the optimizer update of stage s, always the stage's last op.
// Modes:
//   SCHED_BP_GPIPE  all F, then all B in reverse micro-batch order (LIFO, as torchgpipe), then U
//   SCHED_BP_1F1B   PipeDream-flush: M-s-1 warm-up F, then one F one B, then the cool-down Bs
//   SCHED_FG        F only, then U once the last stage has every d_b
//   SCHED_FG_BP     the FG timetable unchanged, plus B ops of n_sel selected micro-batches
//                   fitted into its idle gaps (lag 0: this iteration's; lag 1: the previous
//                   iteration's, iteration_offset -1). Selected are micro-batches 0..n_sel-1.
// Times are doubles in any unit; the Chrome trace takes them to be seconds.
#ifndef FGPIPE_SCHEDULE_H
#define FGPIPE_SCHEDULE_H

#include <stdio.h>

#include "common.h"

enum { SCHED_MAX_STAGES = 64, SCHED_MAX_MICROBATCHES = 1024 };

typedef enum { SCHED_BP_GPIPE, SCHED_BP_1F1B, SCHED_FG, SCHED_FG_BP } ScheduleMode;
typedef enum { OP_F, OP_B, OP_U } OpKind;

typedef struct {
    int M;              // pipeline stages, 1..SCHED_MAX_STAGES
    int N;              // micro-batches per iteration, 1..SCHED_MAX_MICROBATCHES
    ScheduleMode mode;
    int lag;            // SCHED_FG_BP: 0 or 1; must be 0 in the other modes
    int n_sel;          // SCHED_FG_BP: micro-batches to backprop, 0..N, or -1 for as many as fit
                        // without lengthening the FG makespan; ignored in the other modes
    const double *cost_f, *cost_b, *cost_u;  // [M] each: F (> 0), B (> 0), update (>= 0);
                                             // cost_b may be NULL in SCHED_FG
} ScheduleSpec;

typedef struct {
    OpKind kind;
    int stage;
    int microbatch;        // -1 for U
    int iteration_offset;  // 0, or -1 for a lag-1 B op of the previous iteration's micro-batch
    double start, end;
} ScheduledOp;

typedef struct {
    int M, N;
    ScheduleMode mode;
    int lag;
    int n_sel;        // micro-batches backpropagated: N (bp), 0 (fg), 0..n_sel-1 (fg+bp)
    int n_fit;        // fg+bp: how many of those fitted in the bubbles; n_fit < n_sel means the
                      // explicit n_sel lengthened the iteration past fg_makespan
    ScheduledOp *ops;                // n_ops, grouped by stage, each stage in execution order
    int n_ops;
    int *stage_first, *stage_count;  // [M]: stage s runs ops[stage_first[s] .. +stage_count[s]-1]
    double makespan;                 // end of the last op
    double fg_makespan;              // makespan of the pure-FG timetable of the same costs
} Schedule;

typedef struct {
    double makespan;
    double bubble_fraction;   // idle time / (M * makespan)
    double bubble_used_by_b;  // fg+bp: share of the FG timetable's idle time now filled by B
                              // ops (B time before the last F ends); 0 in the other modes
} ScheduleStats;

const char *schedule_mode_name(ScheduleMode mode);  // "bp-gpipe", "bp-1f1b", "fg", "fg+bp"

// Validates spec (messages name the field) and builds the timetable into out, which owns its
// arrays afterwards (schedule_free). On error out is left empty.
int schedule_build(const ScheduleSpec *spec, Schedule *out, FgError *err);
void schedule_free(Schedule *s);

ScheduleStats schedule_stats(const Schedule *s);

// Checks every invariant of the timetable against the spec it was built from: op durations,
// no overlap on a stage, each F once per stage in micro-batch order, B exactly once per stage
// for each backpropagated micro-batch and for no other, dependencies, U last and after what
// it needs, F times identical to FG (fg, fg+bp), GPipe/1F1B order and memory bound, makespan.
// Returns FG_OK, or FG_ERR_INTERNAL with the first violated invariant in err.
int schedule_check(const Schedule *s, const ScheduleSpec *spec, FgError *err);

// Chrome trace JSON (load in Perfetto or chrome://tracing): one complete event ("ph":"X") per
// op, pid 0, tid = stage, name "F3", "B3", "B3'" (lag-1 op) or "U", ts/dur in microseconds,
// category = label.
int schedule_write_chrome_trace(const Schedule *s, FILE *f, const char *label, FgError *err);
// Several timelines in one file, timeline t as pid t named labels[t] (e.g. planned, measured).
int schedule_write_chrome_traces(const Schedule *const *s, const char *const *labels, int n,
                                 FILE *f, FgError *err);

#endif
