// Pipeline schedule builder (docs/pipeline.md): the timetable of training steps, for every
// stage the ordered list of its ops with planned start and end times, built deterministically
// from per-stage op costs. No MPI here: the runtime executes the timetable, and both the
// planned and the measured timelines can be exported as Chrome trace JSON.
//
// Ops: F(s,b) forward of micro-batch b on stage s (with tangents in the fg modes); B(s,b) its
// whole backward (bp modes); in fg+bp the backward split as in Zero Bubble pipelines: Bi(s,b)
// takes the adjoint of the stage's output from stage s+1 (the last stage: from the loss),
// sends the adjoint of its input to stage s-1 and keeps what Bw needs; Bw(s,b) adds the
// stage's weight gradient and depends on nothing downstream, so it fills any gap. U(s) is the
// optimizer update of stage s, always the stage's last op.
// Modes:
//   SCHED_BP_GPIPE  all F, then all B in reverse micro-batch order (LIFO, as torchgpipe), then U
//   SCHED_BP_1F1B   PipeDream-flush: M-s-1 warm-up F, then one F one B, then the cool-down Bs
//   SCHED_BP_ZB     Zero Bubble's ZB-H1 (Qi et al., ICLR 2024): 1F1B's order with B split into
//                   Bi and Bw, stage s's Bw ops s micro-batches behind its Bi ops; the deferred
//                   Bw ops fill the cool-down, where a stage waits for adjoints. Every stage
//                   then holds up to M stashes (1F1B: M-s) and up to s+1 kept adjoints.
//   SCHED_FG        F only, then U once the last stage has every d_b
//   SCHED_FG_BP     the FG timetable unchanged, plus adjoint chains (Bi(M-1,b), Bi(M-2,b), ...,
//                   each stage's Bw after its Bi) fitted into its idle gaps.
//
// Phases and lags (fg+bp): the timetable may span n_phases steps; step k runs phase
// k mod n_phases. A B, Bi or Bw op with lag l works on micro-batch b of the step l steps
// before the one it runs in (its stash was made then, at the weights of then). An adjoint
// chain (source phase, b) reaches the stages M-1 down to some stage: the micro-batches a
// stage backpropagates are a subset of those its downstream neighbour does (nested groups).
//   select = -1 (auto): the builder picks how many chains, of which phases, and where,
//       from the costs: every op ends before the last F ends (so the step is as long as FG's),
//       each op's lag <= lag, chains in the same order on every stage (each link delivers in
//       the order its receiver consumes).
//   select = n >= 0 (explicit): micro-batches 0..n-1 on every stage, every op at lag `lag`,
//       one phase; ops that do not fit the gaps run after the last F (n_fit < n).
// Times are doubles in any unit; the Chrome trace takes them to be seconds.
#ifndef FGPIPE_SCHEDULE_H
#define FGPIPE_SCHEDULE_H

#include <stdio.h>

#include "common.h"

enum { SCHED_MAX_STAGES = 64, SCHED_MAX_MICROBATCHES = 1024, SCHED_MAX_LAG = 2 };

typedef enum { SCHED_BP_GPIPE, SCHED_BP_1F1B, SCHED_FG, SCHED_FG_BP, SCHED_BP_ZB } ScheduleMode;
typedef enum { OP_F, OP_B, OP_BI, OP_BW, OP_U } OpKind;

typedef struct {
    int M;              // pipeline stages, 1..SCHED_MAX_STAGES
    int N;              // micro-batches per step, 1..SCHED_MAX_MICROBATCHES
    ScheduleMode mode;
    int lag;            // fg+bp: explicit select: every op's lag; auto: the most an op may
                        // have; 0..SCHED_MAX_LAG. Must be 0 in the other modes.
    int select;         // fg+bp: -1 auto, or n >= 0 chains (micro-batches 0..n-1, n <= N)
    // [M] each: F (> 0), Bi and Bw (> 0; bp's B costs Bi + Bw; NULL in fg), update (>= 0).
    const double *cost_f, *cost_bi, *cost_bw, *cost_u;
    int bw_redoes_bi;   // recompute: a Bw op first redoes its Bi (the rerun and the input
                        // adjoints) from the kept input and output adjoint: cost_bi + cost_bw
} ScheduleSpec;

typedef struct {
    OpKind kind;
    int stage;
    int microbatch;     // -1 for U
    int lag;            // B, Bi, Bw: the step it works on is this many steps back
    double start, end;  // within its step
} ScheduledOp;

typedef struct {
    int M, N;
    ScheduleMode mode;
    int lag;          // the spec's
    int select;       // the spec's
    int n_phases;     // step k runs phase k mod n_phases (1 outside fg+bp)
    int n_chains;     // fg+bp: adjoint chains per n_phases steps
    int n_fit;        // explicit fg+bp: chains that end before the last F
    ScheduledOp *ops;                // n_ops, grouped by phase then stage, in execution order
    int n_ops;
    int *stage_first, *stage_count;  // [n_phases * M]: phase p, stage s runs
                                     // ops[stage_first[p*M+s] .. + stage_count[p*M+s] - 1]
    double makespan;                 // end of the last op of any phase
    double fg_makespan;              // makespan of the pure-FG timetable of the same costs
    double last_f;                   // when the last F ends (every phase)
} Schedule;

typedef struct {
    double makespan;
    double bubble_fraction;   // idle time / (M * makespan), over the phases
    double bubble_used_by_b;  // fg+bp: share of FG's idle time before the last F that B ops
                              // fill; 0 in the other modes
} ScheduleStats;

// What a timetable with backward ops gives stage s, over its n_phases steps (all 0 in fg).
typedef struct {
    int corrections;   // B or Bw ops: micro-batches whose exact gradient enters the update
    int max_lag;       // the largest lag of its ops (0 without ops)
    int stashes;       // most stashes (F to B or Bw) alive at once, steady state
    int kept;          // most Bi-to-Bw adjoint buffers alive at once, steady state
    double bubble_used;// fg+bp: share of the stage's FG idle time before the last F used by B ops
} StageBubbles;

const char *schedule_mode_name(ScheduleMode mode);  // "bp-gpipe", "bp-1f1b", "bp-zb", "fg", "fg+bp"
const char *op_kind_name(OpKind kind);              // "F", "B", "Bi", "Bw", "U"

// Validates spec (messages name the field) and builds the timetable into out, which owns its
// arrays afterwards (schedule_free). On error out is left empty.
int schedule_build(const ScheduleSpec *spec, Schedule *out, FgError *err);
void schedule_free(Schedule *s);
// schedule_build, then for fg+bp with cost_zero (seconds per stage to clear its gradient,
// which a step's first Bw does; NULL: none) again with each Bw planned with its share of that:
// the cost of a Bw op is cost_bw + cost_zero / (Bw ops per step) in out's timetable.
int schedule_build_clearing(const ScheduleSpec *spec, const double *cost_zero, Schedule *out,
                            FgError *err);

ScheduleStats schedule_stats(const Schedule *s);
StageBubbles schedule_stage_bubbles(const Schedule *s, int stage);
// The micro-batches whose exact gradients every stage averages each step, at the same places:
// all N in bp's timetables (and fg's, which has none to average), fg+bp's explicit select n;
// 0 where each stage averages its own corrections of the step (fg+bp's auto timetable).
int schedule_fixed_corrections(const Schedule *s);

// The ops of phase `phase`, stage s: *first, and the count as the return value.
int schedule_stage_ops(const Schedule *s, int phase, int stage, const ScheduledOp **first);

// The phase whose step made the stash of an op with `lag` running in `phase` (its chain's
// source phase).
int schedule_source_phase(const Schedule *s, int phase, int lag);
// fg+bp: the Bi or Bw op (kind) of chain (source phase, micro-batch b) on stage `stage`, or
// NULL where the chain does not reach it.
const ScheduledOp *schedule_chain_op(const Schedule *s, OpKind kind, int source, int b, int stage);

// Whether stage s keeps a stash of micro-batch b made in phase `phase` (some Bi or B op of a
// later or the same phase works on it).
int schedule_stashes(const Schedule *s, int phase, int stage, int b);

// Checks every invariant of the timetable against the spec it was built from: op durations,
// no overlap on a stage, each F once per stage in micro-batch order at FG's times (fg modes),
// the chains' dependencies and nesting, lags, nothing after the last F (auto), link order,
// U last and after what it needs, GPipe/1F1B order and memory bound, makespan.
// Returns FG_OK, or FG_ERR_INTERNAL with the first violated invariant in err.
int schedule_check(const Schedule *s, const ScheduleSpec *spec, FgError *err);

// Chrome trace JSON (load in Perfetto or chrome://tracing): one complete event ("ph":"X") per
// op, pid = timeline, tid = stage, name "F3", "B3", "Bi3", "Bw3'" (each ' one step of lag)
// or "U", ts/dur in microseconds; phase p's ops are shifted by p steps.
int schedule_write_chrome_trace(const Schedule *s, FILE *f, const char *label, FgError *err);
// Several timelines in one file, timeline t as pid t named labels[t] (e.g. planned, measured).
int schedule_write_chrome_traces(const Schedule *const *s, const char *const *labels, int n,
                                 FILE *f, FgError *err);

#endif
