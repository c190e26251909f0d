// schedule_check: every invariant of a timetable, checked against the spec it was built from.
#include "schedule_internal.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    const Schedule *S;
    const ScheduleSpec *sp;
    double eps, T;
    const ScheduledOp **f;       // [M*N]: F(s,b) of phase 0 (every phase has the same F ops)
    const ScheduledOp **b;       // bp: [M*N]
    const ScheduledOp **bi, **bw;// fg+bp: [n_phases*N*M] by (source phase, b, s)
    double *fg_end_f;            // [M*N]
} Check;

static int fail_dep(FgError *err, const ScheduledOp *o, const ScheduledOp *dep) {
    char a[64], b[64];
    return fg_fail(err, FG_ERR_INTERNAL, "schedule: dependency: %s starts at %g before %s ends at %g",
                   schedule_op_name(o, a, sizeof a), o->start, schedule_op_name(dep, b, sizeof b), dep->end);
}

// B is whole-backward bp's; Bi and Bw are fg+bp's and zero-bubble bp's.
static int kind_allowed(ScheduleMode mode, OpKind kind) {
    if (kind == OP_B) return mode == SCHED_BP_GPIPE || mode == SCHED_BP_1F1B;
    if (kind == OP_BI || kind == OP_BW) return mode == SCHED_FG_BP || mode == SCHED_BP_ZB;
    return 1;
}

// One phase of one stage: well-formed ops with their costs, in order without overlap, U last.
static int check_list(Check *c, int p, int s, FgError *err) {
    const Schedule *S = c->S;
    const int N = S->N, M = S->M;
    const ScheduledOp *ops;
    const int n = schedule_stage_ops(S, p, s, &ops);
    char a[64], b[64];
    int next_f = 0;
    if (n < 1 || ops[n - 1].kind != OP_U)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: phase %d stage %d does not end with U", p, s);
    for (int i = 0; i < n; i++) {
        const ScheduledOp *o = &ops[i];
        if (o->stage != s || (int)o->kind < OP_F || (int)o->kind > OP_U ||
            (o->kind != OP_U && (o->microbatch < 0 || o->microbatch >= N)) ||
            (o->kind == OP_U && i != n - 1) || o->lag < 0 || o->lag > SCHED_MAX_LAG ||
            ((o->kind == OP_F || o->kind == OP_U) && o->lag))
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: op %d of phase %d stage %d is malformed",
                           i, p, s);
        if (!(o->start >= -c->eps) || fabs(o->end - o->start - schedule_planned_cost(c->sp, o)) > c->eps)
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s runs [%g, %g], its cost is %g",
                           schedule_op_name(o, a, sizeof a), o->start, o->end,
                           schedule_planned_cost(c->sp, o));
        if (i > 0 && o->start < ops[i - 1].end - c->eps)
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: overlap on stage %d: %s and %s", s,
                           schedule_op_name(&ops[i - 1], a, sizeof a), schedule_op_name(o, b, sizeof b));
        if (o->kind == OP_F) {
            if (o->microbatch != next_f++)
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: stage %d runs %s out of micro-batch order", s,
                               schedule_op_name(o, a, sizeof a));
            // Not before fg has it (its input), and the last F where fg has it.
            const double fg_end = c->fg_end_f[s * N + o->microbatch];
            const int last = s == M - 1 && o->microbatch == N - 1;
            if (!schedule_is_bp(S->mode) &&
                (o->end < fg_end - c->eps || (last && fabs(o->end - fg_end) > c->eps)))
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s moved relative to FG: ends at %g, fg's at %g",
                               schedule_op_name(o, a, sizeof a), o->end, fg_end);
            // After its input, and in every phase at the same time (phase 0's F ops are known
            // here: phases are checked in order, stages in order within a phase).
            const ScheduledOp *input = s > 0 ? c->f[(s - 1) * N + o->microbatch] : NULL;
            if (!schedule_is_bp(S->mode) && input && o->start < input->end - c->eps)
                return fail_dep(err, o, input);
            const ScheduledOp *first = c->f[s * N + o->microbatch];
            if (p > 0 && first && fabs(o->end - first->end) > c->eps)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s ends at %g in phase %d, at %g in phase 0",
                               schedule_op_name(o, a, sizeof a), o->end, p, first->end);
            if (p == 0) c->f[s * N + o->microbatch] = o;
        }
        const ScheduledOp **slot = NULL;
        if (o->kind == OP_B) slot = &c->b[s * N + o->microbatch];
        if (o->kind == OP_BI || o->kind == OP_BW)
            slot = &(o->kind == OP_BI ? c->bi : c->bw)[((size_t)schedule_source_phase(S, p, o->lag) * N + o->microbatch) * M + s];
        if (!kind_allowed(S->mode, o->kind))
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s in a %s timetable",
                           schedule_op_name(o, a, sizeof a), schedule_mode_name(S->mode));
        if (slot && *slot)
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s appears twice",
                           schedule_op_name(o, a, sizeof a));
        if (slot) *slot = o;
    }
    if (next_f != N)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d runs %d F ops, not %d", s, next_f, N);
    return FG_OK;
}

// A bp op's inputs: the stage's F of its micro-batch (the stash), and the adjoint: B or Bi of
// the next stage (the loss on the last); a Bw's is its Bi. NULL where one is missing.
static const ScheduledOp *bp_input(const Check *c, const ScheduledOp *o, int adjoint) {
    const int M = c->S->M, N = c->S->N, s = o->stage, b = o->microbatch;
    if (!adjoint) return c->f[s * N + b];
    if (o->kind == OP_BW) return c->bi[(size_t)b * M + s];
    if (s == M - 1) return c->f[s * N + b];
    return o->kind == OP_B ? c->b[(s + 1) * N + b] : c->bi[(size_t)b * M + s + 1];
}

// Micro-batches a bp stage may hold stashes of (F done, B or Bw not yet): GPipe all of them,
// 1F1B M-s, ZB-H1 M (its Bw ops run s micro-batches late).
static int bp_stash_bound(const Schedule *S, int s) {
    return S->mode == SCHED_BP_GPIPE ? S->N : S->mode == SCHED_BP_1F1B ? S->M - s : S->M;
}

// The bp modes: each op after its inputs; U after the stage's last backward op (check_list);
// GPipe runs no F after a B; at most bp_stash_bound stashes; every micro-batch backpropagated.
static int check_bp(Check *c, FgError *err) {
    const Schedule *S = c->S;
    const int M = S->M, N = S->N;
    char a[64];
    for (int s = 0; s < M; s++) {
        const ScheduledOp *ops;
        const int n = schedule_stage_ops(S, 0, s, &ops);
        int in_flight = 0, seen_b = 0;
        for (int i = 0; i < n - 1; i++) {
            const ScheduledOp *o = &ops[i];
            const int n_inputs = o->kind == OP_F ? s > 0 : 2;
            for (int k = 0; k < n_inputs; k++) {
                const ScheduledOp *dep = o->kind == OP_F ? c->f[(s - 1) * N + o->microbatch]
                                                         : bp_input(c, o, k);
                if (!dep) return fg_fail(err, FG_ERR_INTERNAL, "schedule: an input of %s is missing",
                                         schedule_op_name(o, a, sizeof a));
                if (o->start < dep->end - c->eps) return fail_dep(err, o, dep);
            }
            if (o->kind == OP_F && S->mode == SCHED_BP_GPIPE && seen_b)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: GPipe stage %d runs %s after a B op", s,
                               schedule_op_name(o, a, sizeof a));
            seen_b |= o->kind == OP_B;
            in_flight += o->kind == OP_F ? 1 : o->kind == OP_B || o->kind == OP_BW ? -1 : 0;
            if (in_flight > bp_stash_bound(S, s))
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s stage %d holds %d stashes, more than %d",
                               schedule_mode_name(S->mode), s, in_flight, bp_stash_bound(S, s));
        }
        for (int b = 0; b < N; b++)
            if (!(S->mode == SCHED_BP_ZB ? c->bi[(size_t)b * M + s] && c->bw[(size_t)b * M + s]
                                         : c->b[s * N + b] != NULL))
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: micro-batch %d is not backpropagated on stage %d", b, s);
    }
    return FG_OK;
}

// Unrolled time of an op of chain (source, b) relative to the start of its source step.
static double rel(const Check *c, const ScheduledOp *o, double t) { return o->lag * c->T + t; }

// One chain: Bi and Bw together, nested, after their inputs, within the lag rules.
static int check_chain(Check *c, int source, int b, FgError *err) {
    const Schedule *S = c->S;
    const int M = S->M, N = S->N, auto_sel = S->select < 0;
    const ScheduledOp **bi = c->bi + ((size_t)source * N + b) * M, **bw = c->bw + ((size_t)source * N + b) * M;
    char a[64];
    for (int s = 0; s < M; s++) {
        if (!bi[s] != !bw[s])
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d has %s of micro-batch %d (source phase %d) without its %s",
                           s, bi[s] ? "Bi" : "Bw", b, source, bi[s] ? "Bw" : "Bi");
        if (!bi[s]) continue;
        if (s < M - 1 && !bi[s + 1])
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: not nested: stage %d backpropagates micro-batch %d (source phase %d), stage %d does not",
                           s, b, source, s + 1);
        for (int k = 0; k < 2; k++) {
            const ScheduledOp *o = k ? bw[s] : bi[s];
            if (auto_sel ? o->lag > S->lag : o->lag != S->lag)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s has lag %d, the spec allows %s%d",
                               schedule_op_name(o, a, sizeof a), o->lag, auto_sel ? "<= " : "", S->lag);
            if (auto_sel && o->end > S->last_f + c->eps)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s ends at %g, after the last F (%g)",
                               schedule_op_name(o, a, sizeof a), o->end, S->last_f);
        }
        const ScheduledOp *deps[3] = {c->f[s * N + b], s < M - 1 ? bi[s + 1] : c->f[(M - 1) * N + b], NULL};
        for (int k = 0; k < 2; k++) {  // F ops ran in the source step: lag 0
            const double dep_end = deps[k]->kind == OP_F ? deps[k]->end : rel(c, deps[k], deps[k]->end);
            if (rel(c, bi[s], bi[s]->start) < dep_end - c->eps) return fail_dep(err, bi[s], deps[k]);
        }
        if (rel(c, bw[s], bw[s]->start) < rel(c, bi[s], bi[s]->end) - c->eps) return fail_dep(err, bw[s], bi[s]);
    }
    if (!auto_sel && b < S->select && !bw[0])
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: selected micro-batch %d does not reach stage 0", b);
    if (!auto_sel && b >= S->select && bw[M - 1])
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: micro-batch %d is backpropagated but not selected", b);
    return FG_OK;
}

// Each link delivers adjoints in the order its receiver consumes them: stage s runs its Bi ops
// in the order stage s+1 ran theirs, also across periods.
static int check_link_order(Check *c, int s, FgError *err) {
    const Schedule *S = c->S;
    const int M = S->M, N = S->N, P = S->n_phases;
    double *up = malloc(sizeof(double) * (size_t)P * N), *down = malloc(sizeof(double) * (size_t)P * N);
    int n = 0, rc = FG_OK;
    for (int src = 0; src < P; src++)
        for (int b = 0; b < N; b++) {
            const ScheduledOp **bi = c->bi + ((size_t)src * N + b) * M;
            if (!bi[s]) continue;
            up[n] = src * c->T + rel(c, bi[s + 1], bi[s + 1]->start);
            down[n++] = src * c->T + rel(c, bi[s], bi[s]->start);
        }
    for (int i = 1; i < n; i++)  // insertion sort by the sender's time
        for (int j = i; j > 0 && up[j] < up[j - 1]; j--) {
            double t = up[j]; up[j] = up[j - 1]; up[j - 1] = t;
            t = down[j]; down[j] = down[j - 1]; down[j - 1] = t;
        }
    for (int i = 1; i < n && !rc; i++)
        if (down[i] <= down[i - 1])
            rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d receives adjoints out of the order stage %d sends them", s, s + 1);
    if (!rc && n > 1 && down[n - 1] >= down[0] + P * c->T)
        rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d's adjoints of one period overtake the next period's", s);
    free(up);
    free(down);
    return rc;
}

static int check_fill(Check *c, FgError *err) {
    const Schedule *S = c->S;
    const int M = S->M, N = S->N, P = S->n_phases;
    int rc = FG_OK, most_per_phase = 0;
    for (int src = 0; src < P && !rc; src++) {
        int sourced = 0;
        for (int b = 0; b < N && !rc; b++) {
            rc = check_chain(c, src, b, err);
            sourced += c->bi[((size_t)src * N + b) * M + M - 1] != NULL;
        }
        most_per_phase = FG_MAX(most_per_phase, sourced);
    }
    for (int s = 0; s < M - 1 && !rc; s++) rc = check_link_order(c, s, err);
    for (int s = 0; s < M && !rc; s++) {
        const StageBubbles sb = schedule_stage_bubbles(S, s);
        if (sb.stashes > (S->lag + 1) * most_per_phase)
            rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d holds %d stashes, more than (lag + 1) x %d chains",
                         s, sb.stashes, most_per_phase);
    }
    return rc;
}

// U after every F's d_b and every B op's part of c in its phase.
static int check_updates(Check *c, FgError *err) {
    const Schedule *S = c->S;
    const ScheduledOp *last_f = c->f[(S->M - 1) * S->N + S->N - 1];
    for (int p = 0; p < S->n_phases; p++) {
        double latest = 0.0;
        const ScheduledOp *latest_op = NULL, *ops;
        for (int s = 0; s < S->M; s++) {
            const int n = schedule_stage_ops(S, p, s, &ops);
            for (int i = 0; i < n - 1; i++)
                if (ops[i].kind != OP_F && ops[i].end > latest) latest = ops[i].end, latest_op = &ops[i];
        }
        for (int s = 0; s < S->M; s++) {
            const int n = schedule_stage_ops(S, p, s, &ops);
            const ScheduledOp *u = &ops[n - 1];
            if (schedule_is_bp(S->mode)) {
                if (n > 1 && u->start < ops[n - 2].end - c->eps) return fail_dep(err, u, &ops[n - 2]);
                continue;
            }
            if (u->start < last_f->end - c->eps) return fail_dep(err, u, last_f);
            if (latest_op && u->start < latest - c->eps) return fail_dep(err, u, latest_op);
        }
    }
    return FG_OK;
}

int schedule_check(const Schedule *S, const ScheduleSpec *sp, FgError *err) {
    int rc = schedule_validate(sp, err);
    if (rc) return rc;
    if (!S || !S->ops || !S->stage_first || !S->stage_count || S->n_phases < 1)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: empty schedule");
    if (S->M != sp->M || S->N != sp->N || S->mode != sp->mode || S->lag != sp->lag || S->select != sp->select)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: built for M=%d N=%d %s lag %d select %d, spec has M=%d N=%d %s lag %d select %d",
                       S->M, S->N, schedule_mode_name(S->mode), S->lag, S->select, sp->M, sp->N,
                       schedule_mode_name(sp->mode), sp->lag, sp->select);
    if (S->mode != SCHED_FG_BP && S->n_phases != 1)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s has %d phases", schedule_mode_name(S->mode), S->n_phases);
    const int M = S->M, N = S->N, P = S->n_phases;
    Check c = {.S = S, .sp = sp, .eps = 1e-9 * FG_MAX(S->makespan, 1e-300), .T = S->makespan};
    c.f = calloc((size_t)M * N, sizeof *c.f);
    c.b = calloc((size_t)M * N, sizeof *c.b);
    c.bi = calloc((size_t)P * N * M, sizeof *c.bi);
    c.bw = calloc((size_t)P * N * M, sizeof *c.bw);
    c.fg_end_f = malloc(sizeof(double) * (size_t)M * N);
    timetable_fg_ends(sp, c.fg_end_f);
    int total = 0;
    for (int p = 0; p < P && !rc; p++)
        for (int s = 0; s < M && !rc; s++) {
            rc = check_list(&c, p, s, err);
            total += S->stage_count[p * M + s];
        }
    if (!rc && total != S->n_ops)
        rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: the stages hold %d ops, n_ops = %d", total, S->n_ops);
    if (!rc && schedule_is_bp(S->mode)) rc = check_bp(&c, err);
    if (!rc && S->mode == SCHED_FG_BP) rc = check_fill(&c, err);
    if (!rc) rc = check_updates(&c, err);
    double end = 0.0;
    for (int i = 0; i < S->n_ops; i++) end = FG_MAX(end, S->ops[i].end);
    if (!rc && fabs(end - S->makespan) > c.eps)
        rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: makespan %g, but the last op ends at %g", S->makespan, end);
    free(c.f), free(c.b), free(c.bi), free(c.bw), free(c.fg_end_f);
    return rc;
}
