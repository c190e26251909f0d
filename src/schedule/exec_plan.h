// How a stage runs its part of the timetable, and the messages that follow from it.
//
// The timetable (schedule.h) orders each stage's ops. A stage runs them in groups: an op group
// is one or more ops of one kind whose micro-batches pass through the stage's layers together,
// each layer once for the group. Micro-batch-major (the timetable as it is): every op is its
// own group. Layer-major (a stage that streams its layers, so each layer is read once per
// wave): all F ops form one group, all backward ops (B, Bi, Bw) the next, then U; the order
// inside a group is the timetable's. A timetable of several phases has one plan per phase. The message plan lists what each stage receives and sends in the order it does
// so; the runtime posts its receives from it and tests/test_message_order.c checks with it that
// every link delivers in the order its receiver consumes (NCCL matches by order, not by tag).
#ifndef FGPIPE_EXEC_PLAN_H
#define FGPIPE_EXEC_PLAN_H

#include "schedule.h"

typedef struct {
    OpKind kind;           // OP_F, OP_U, or OP_B: backward ops of any kind (B, Bi, Bw)
    int first, count;      // ExecPlan.op[first .. first + count)
} OpGroup;

typedef struct {
    int layer_major;
    int n_ops;
    int *op;               // timetable indices of the stage's ops, in execution order
    int n_groups;
    OpGroup *groups;
    int max_group;         // ops in the largest F or B group
} ExecPlan;

void exec_plan_build(const Schedule *s, int phase, int stage, int layer_major, ExecPlan *out);
void exec_plan_free(ExecPlan *p);

// Whether op runs in a step of a run that started at first_step: a B op of lag l needs the
// stash of l steps before, which the run's first l steps do not have.
int op_runs(const ScheduledOp *op, long step, long first_step);

// Whether a Bi or B op sends its input adjoint to the stage before (its chain goes on there):
// the lag of the op there that takes it, or -1.
int op_adjoint_taker_lag(const Schedule *s, int phase, const ScheduledOp *op);

// Message kinds, also the first part of their tags.
enum { MSG_FORWARD = 0, MSG_BACKWARD = 1, MSG_EVAL = 2, MSG_TIED = 3 };

typedef struct {
    int op;                // timetable index of the op that consumes or sends it
    int peer;              // the other stage
    int kind;              // MSG_FORWARD (activations and tangents) or MSG_BACKWARD (adjoint)
    int microbatch;
    int lag;               // an adjoint's: of the micro-batch of `lag` steps before
} PlannedMessage;

typedef struct {
    int n_recv, n_send;
    PlannedMessage *recv;  // in the order the stage consumes them
    PlannedMessage *send;  // in the order the stage sends them
} MessagePlan;

// The messages of stage `stage` in a step run by `plan` (of the step's phase), the run's
// step number `into_run` (0 for its first: ops with a lag beyond it do not run).
void message_plan_build(const Schedule *s, const ExecPlan *plan, int phase, int stage,
                        long into_run, MessagePlan *out);
void message_plan_free(MessagePlan *m);

// The tag of a message: kind, the step (mod 4, beyond the largest lag) and the micro-batch
// (< 1024), so a stage can never take one micro-batch's data for another's.
int message_tag(int kind, long step, int mb);

#endif
