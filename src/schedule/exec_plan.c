#include "exec_plan.h"

#include <stdlib.h>

#include "common.h"

static void add_group(ExecPlan *p, OpKind kind, int first, int count) {
    if (!count) return;
    p->groups[p->n_groups++] = (OpGroup){kind, first, count};
    if (kind != OP_U) p->max_group = FG_MAX(p->max_group, count);
}

static OpKind group_kind(OpKind k) { return k == OP_BI || k == OP_BW ? OP_B : k; }

void exec_plan_build(const Schedule *s, int phase, int stage, int layer_major, ExecPlan *out) {
    const ScheduledOp *ops;
    int n = schedule_stage_ops(s, phase, stage, &ops), first = (int)(ops - s->ops);
    *out = (ExecPlan){.layer_major = layer_major, .n_ops = n};
    out->op = fg_alloc_bytes((size_t)FG_MAX(n, 1) * sizeof(int));
    out->groups = fg_alloc_bytes((size_t)FG_MAX(n, 1) * sizeof(OpGroup));
    if (!layer_major) {
        for (int i = 0; i < n; i++) {
            out->op[i] = first + i;
            add_group(out, group_kind(ops[i].kind), i, 1);
        }
        return;
    }
    // Layer-major: F ops, then backward ops, then U, each kind in timetable order.
    static const OpKind order[] = {OP_F, OP_B, OP_U};
    int k = 0;
    for (int o = 0; o < 3; o++) {
        int start = k;
        for (int i = 0; i < n; i++)
            if (group_kind(ops[i].kind) == order[o]) out->op[k++] = first + i;
        add_group(out, order[o], start, k - start);
    }
}

void exec_plan_free(ExecPlan *p) {
    fg_free(p->op);
    fg_free(p->groups);
    *p = (ExecPlan){0};
}

int op_runs(const ScheduledOp *op, long step, long first_step) { return step - op->lag >= first_step; }

int op_adjoint_taker_lag(const Schedule *s, int phase, const ScheduledOp *op) {
    if (op->stage == 0 || (op->kind != OP_B && op->kind != OP_BI)) return -1;
    if (op->kind == OP_B) return 0;
    const ScheduledOp *taker = schedule_chain_op(s, OP_BI, schedule_source_phase(s, phase, op->lag),
                                                 op->microbatch, op->stage - 1);
    return taker ? taker->lag : -1;
}

void message_plan_build(const Schedule *s, const ExecPlan *plan, int phase, int stage,
                        long into_run, MessagePlan *out) {
    int last = s->M - 1;
    *out = (MessagePlan){0};
    out->recv = fg_alloc_bytes((size_t)FG_MAX(plan->n_ops, 1) * sizeof(PlannedMessage));
    out->send = fg_alloc_bytes((size_t)FG_MAX(plan->n_ops, 1) * sizeof(PlannedMessage));
    // Ops exchange messages in execution order: within a group, every op receives before the
    // group computes and sends after, so per direction the order is the ops' order.
    for (int i = 0; i < plan->n_ops; i++) {
        int idx = plan->op[i];
        const ScheduledOp *op = &s->ops[idx];
        if (op->kind == OP_F) {
            if (stage > 0) out->recv[out->n_recv++] = (PlannedMessage){idx, stage - 1, MSG_FORWARD, op->microbatch, 0};
            if (stage < last) out->send[out->n_send++] = (PlannedMessage){idx, stage + 1, MSG_FORWARD, op->microbatch, 0};
        } else if ((op->kind == OP_B || op->kind == OP_BI) && op_runs(op, into_run, 0)) {
            PlannedMessage m = {idx, 0, MSG_BACKWARD, op->microbatch, op->lag};
            if (stage < last) m.peer = stage + 1, out->recv[out->n_recv++] = m;
            if (op_adjoint_taker_lag(s, phase, op) >= 0) m.peer = stage - 1, out->send[out->n_send++] = m;
        }
    }
}

void message_plan_free(MessagePlan *m) {
    fg_free(m->recv);
    fg_free(m->send);
    *m = (MessagePlan){0};
}

int message_tag(int kind, long step, int mb) {
    return (kind << 12) | (int)((step & 3) << 10) | (mb & 1023);
}
