#include "schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// A makespan "does not exceed" another within this relative slack: the two are sums of the
// same costs in different orders.
#define SCHED_REL_SLACK 1e-9

const char *schedule_mode_name(ScheduleMode mode) {
    switch (mode) {
    case SCHED_BP_GPIPE: return "bp-gpipe";
    case SCHED_BP_1F1B: return "bp-1f1b";
    case SCHED_FG: return "fg";
    case SCHED_FG_BP: return "fg+bp";
    }
    return "?";
}

static int check_costs(const double *c, const char *name, int M, int zero_ok, FgError *err) {
    if (!c)
        return fg_fail(err, FG_ERR_INPUT, "schedule: %s is NULL (need %d per-stage costs)", name, M);
    for (int s = 0; s < M; s++)
        if (!isfinite(c[s]) || c[s] < 0.0 || (!zero_ok && c[s] == 0.0))
            return fg_fail(err, FG_ERR_INPUT, "schedule: %s[%d] = %g, must be finite and %s", name,
                           s, c[s], zero_ok ? ">= 0" : "> 0");
    return FG_OK;
}

static int validate(const ScheduleSpec *sp, FgError *err) {
    if (!sp) return fg_fail(err, FG_ERR_INPUT, "schedule: spec is NULL");
    if (sp->M < 1 || sp->M > SCHED_MAX_STAGES)
        return fg_fail(err, FG_ERR_INPUT, "schedule: M (stages) = %d, must be 1..%d", sp->M,
                       SCHED_MAX_STAGES);
    if (sp->N < 1 || sp->N > SCHED_MAX_MICROBATCHES)
        return fg_fail(err, FG_ERR_INPUT, "schedule: N (micro-batches) = %d, must be 1..%d", sp->N,
                       SCHED_MAX_MICROBATCHES);
    if ((int)sp->mode < SCHED_BP_GPIPE || (int)sp->mode > SCHED_FG_BP)
        return fg_fail(err, FG_ERR_INPUT, "schedule: mode = %d is not a ScheduleMode",
                       (int)sp->mode);
    if (sp->mode == SCHED_FG_BP) {
        if (sp->lag != 0 && sp->lag != 1)
            return fg_fail(err, FG_ERR_INPUT, "schedule: lag = %d, must be 0 or 1", sp->lag);
        if (sp->n_sel < -1 || sp->n_sel > sp->N)
            return fg_fail(err, FG_ERR_INPUT,
                           "schedule: n_sel = %d, must be 0..N (%d) or -1 (auto)", sp->n_sel, sp->N);
    } else if (sp->lag != 0) {
        return fg_fail(err, FG_ERR_INPUT, "schedule: lag = %d, only mode fg+bp has a lag (mode %s)",
                       sp->lag, schedule_mode_name(sp->mode));
    }
    int rc = check_costs(sp->cost_f, "cost_f", sp->M, 0, err);
    if (!rc && sp->mode != SCHED_FG) rc = check_costs(sp->cost_b, "cost_b", sp->M, 0, err);
    if (!rc) rc = check_costs(sp->cost_u, "cost_u", sp->M, 1, err);
    return rc;
}

// End times of F(s,b) in the pure-FG timetable, end_f[s*N+b]: each F starts as soon as its
// input has arrived and the stage has finished the previous micro-batch.
static double fg_forward_start(const double *end_f, int N, int s, int b) {
    double t = 0.0;
    if (s > 0) t = end_f[(s - 1) * N + b];
    if (b > 0) t = FG_MAX(t, end_f[s * N + b - 1]);
    return t;
}

static void fg_forward_ends(const ScheduleSpec *sp, double *end_f) {
    for (int s = 0; s < sp->M; s++)
        for (int b = 0; b < sp->N; b++)
            end_f[s * sp->N + b] = fg_forward_start(end_f, sp->N, s, b) + sp->cost_f[s];
}

static double max_cost(const double *c, int M) {
    double m = 0.0;
    for (int s = 0; s < M; s++) m = FG_MAX(m, c[s]);
    return m;
}

// ---------------------------------------------------------------------------------------------
// Building. Each stage's ops live in a segment of capacity 2N+1 (N F, at most N B, one U) of
// out->ops while building, and are packed together at the end.

static int stage_cap(int N) { return 2 * N + 1; }

static ScheduledOp *stage_ops(Schedule *S, int s) { return S->ops + (size_t)s * stage_cap(S->N); }

static void push_op(Schedule *S, int s, OpKind kind, int b, int offset, double start, double cost) {
    ScheduledOp *o = stage_ops(S, s) + S->stage_count[s]++;
    *o = (ScheduledOp){kind, s, b, offset, start, start + cost};
}

// A planned op order for one stage, placed "as soon as possible" by the bp modes.
typedef struct {
    OpKind kind;
    int b;
} Slot;

static int bp_order(const ScheduleSpec *sp, int s, Slot *order) {
    const int N = sp->N;
    int n = 0;
    if (sp->mode == SCHED_BP_GPIPE) {
        for (int b = 0; b < N; b++) order[n++] = (Slot){OP_F, b};
        for (int b = N - 1; b >= 0; b--) order[n++] = (Slot){OP_B, b};
    } else {
        // PipeDream-flush (Narayanan et al.): stage s keeps at most M-s micro-batches in flight.
        const int warm = FG_MIN(sp->M - s - 1, N);
        for (int b = 0; b < warm; b++) order[n++] = (Slot){OP_F, b};
        for (int i = 0; i < N - warm; i++) {
            order[n++] = (Slot){OP_F, warm + i};
            order[n++] = (Slot){OP_B, i};
        }
        for (int b = N - warm; b < N; b++) order[n++] = (Slot){OP_B, b};
    }
    order[n++] = (Slot){OP_U, -1};
    return n;
}

// Runs every stage's order, each op starting when its stage is free and its inputs have
// arrived. Passes over the stages until all ops are placed; a pass without progress means the
// orders wait on each other (a bug in bp_order).
static int build_bp(const ScheduleSpec *sp, Schedule *S, FgError *err) {
    const int M = sp->M, N = sp->N, cap = stage_cap(N);
    Slot *order = fg_alloc_bytes(sizeof(Slot) * (size_t)M * cap);
    int *n_order = fg_alloc_bytes(sizeof(int) * M), *next = fg_alloc_bytes(sizeof(int) * M);
    double *end_f = fg_alloc_bytes(sizeof(double) * M * N);
    double *end_b = fg_alloc_bytes(sizeof(double) * M * N);
    double *free_at = fg_alloc_bytes(sizeof(double) * M);
    int remaining = 0, rc = FG_OK;
    for (int i = 0; i < M * N; i++) end_f[i] = end_b[i] = -1.0;  // not placed yet
    for (int s = 0; s < M; s++) remaining += n_order[s] = bp_order(sp, s, order + (size_t)s * cap);
    while (remaining > 0) {
        int progress = 0;
        for (int s = 0; s < M; s++) {
            while (next[s] < n_order[s]) {
                const Slot o = order[(size_t)s * cap + next[s]];
                double dep = 0.0, cost = sp->cost_u[s];
                if (o.kind == OP_F) {
                    if (s > 0) dep = end_f[(s - 1) * N + o.b];
                    cost = sp->cost_f[s];
                } else if (o.kind == OP_B) {
                    dep = s < M - 1 ? end_b[(s + 1) * N + o.b] : end_f[s * N + o.b];
                    if (end_f[s * N + o.b] < 0.0) dep = -1.0;  // its stash does not exist yet
                    cost = sp->cost_b[s];
                }
                if (dep < 0.0) break;
                const double start = FG_MAX(free_at[s], dep);
                push_op(S, s, o.kind, o.b, 0, start, cost);
                free_at[s] = start + cost;
                if (o.kind == OP_F) end_f[s * N + o.b] = free_at[s];
                if (o.kind == OP_B) end_b[s * N + o.b] = free_at[s];
                next[s]++;
                remaining--;
                progress = 1;
            }
        }
        if (!progress) {
            rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: %s op orders deadlock (%d ops unplaced)",
                         schedule_mode_name(sp->mode), remaining);
            break;
        }
    }
    fg_free(order);
    fg_free(n_order);
    fg_free(next);
    fg_free(end_f);
    fg_free(end_b);
    fg_free(free_at);
    return rc;
}

// Earliest start >= ready of an idle gap of length c among a stage's sorted, non-overlapping
// ops (after the last op the stage is free for ever); *pos gets the index to insert at.
static double earliest_gap(const ScheduledOp *ops, int n, double ready, double c, int *pos) {
    int lo = 0, hi = n;  // first op that ends after ready: earlier ones cannot bound the gap
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ops[mid].end <= ready) lo = mid + 1;
        else hi = mid;
    }
    double t = ready;
    for (int i = lo; i < n; i++) {
        if (t + c <= ops[i].start) {
            *pos = i;
            return t;
        }
        t = FG_MAX(t, ops[i].end);
    }
    *pos = n;
    return t;
}

static void insert_op(Schedule *S, int s, int pos, ScheduledOp op) {
    ScheduledOp *ops = stage_ops(S, s);
    memmove(ops + pos + 1, ops + pos, sizeof(ScheduledOp) * (size_t)(S->stage_count[s] - pos));
    ops[pos] = op;
    S->stage_count[s]++;
}

// FG and FG_BP: the F ops at their FG times; for FG_BP the B chains of the selected
// micro-batches, one micro-batch at a time, stages from last to first (the chain runs
// backwards), each B op in the earliest gap that fits it entirely after its inputs. F ops
// never move. A chain never moves the earlier chains, so the timetable of n+1 chains extends
// that of n, and auto (stop at the first chain that would lengthen the iteration) finds the
// largest n_sel that keeps the FG makespan.
//
// Selected micro-batches are 0..n_sel-1 for both lags. Lag 0: B(s,b) must follow F(M-1,b) and
// F(s,b), and micro-batch b is ready no later than any b' > b on every stage, so the first
// micro-batches fit wherever later ones would (the last ones, whose stash lives shortest, fit
// least: their F ends just before the drain). Lag 1: the previous iteration's F ops are done,
// so every micro-batch is equally placeable; the first ones keep one rule for both lags.
//
// U(s) starts when the last stage has ended its last F (then all d_b are known; the scalar
// allreduce costs 0 here) AND every B op on every stage has ended, for both lags: the same
// allreduce carries each stage's partial c.v_b (docs/design.md section 6), and a stage knows its
// part of c only after its B ops. With lag 1 that c is the previous iteration's gradient used
// by this update; a per-stage rule (U(s) after its own B ops) would free the stash just as
// well but leave the update waiting for the dot products. Either way B ops past the last F
// lengthen the iteration; only an explicit n_sel can make that happen (n_fit < n_sel).
static void build_fg(const ScheduleSpec *sp, Schedule *S) {
    const int M = sp->M, N = sp->N;
    double *end_f = fg_alloc_bytes(sizeof(double) * M * N);
    fg_forward_ends(sp, end_f);
    for (int s = 0; s < M; s++)
        for (int b = 0; b < N; b++)
            push_op(S, s, OP_F, b, 0, fg_forward_start(end_f, N, s, b), sp->cost_f[s]);
    const double t_last_f = end_f[(M - 1) * N + N - 1];
    const double limit = S->fg_makespan * (1.0 + SCHED_REL_SLACK);
    const double max_u = max_cost(sp->cost_u, M);
    double b_end = 0.0;  // end of the latest B op so far
    S->n_sel = S->n_fit = 0;
    if (sp->mode == SCHED_FG_BP) {
        const int want = sp->n_sel < 0 ? N : sp->n_sel, offset = -sp->lag;
        double *start = fg_alloc_bytes(sizeof(double) * M);
        int *pos = fg_alloc_bytes(sizeof(int) * M);
        for (int b = 0; b < want; b++) {
            double ready = sp->lag == 0 ? end_f[(M - 1) * N + b] : 0.0;  // the loss of b
            for (int s = M - 1; s >= 0; s--) {
                // With lag 0, F(s,b) <= F(M-1,b) <= ready: the stash exists by construction.
                start[s] = earliest_gap(stage_ops(S, s), S->stage_count[s], ready, sp->cost_b[s],
                                        &pos[s]);
                ready = start[s] + sp->cost_b[s];
            }
            const int fits = FG_MAX(t_last_f, ready) + max_u <= limit;  // ready: end of B(0,b)
            if (!fits && sp->n_sel < 0) break;
            for (int s = 0; s < M; s++)
                insert_op(S, s, pos[s],
                          (ScheduledOp){OP_B, s, b, offset, start[s], start[s] + sp->cost_b[s]});
            b_end = FG_MAX(b_end, ready);
            S->n_sel++;
            S->n_fit += fits;
        }
        fg_free(start);
        fg_free(pos);
    }
    const double t_u = FG_MAX(t_last_f, b_end);
    for (int s = 0; s < M; s++) push_op(S, s, OP_U, -1, 0, t_u, sp->cost_u[s]);
    fg_free(end_f);
}

int schedule_build(const ScheduleSpec *spec, Schedule *out, FgError *err) {
    if (!out) return fg_fail(err, FG_ERR_INPUT, "schedule: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = validate(spec, err);
    if (rc) return rc;
    const int M = spec->M, N = spec->N;
    Schedule S = {.M = M, .N = N, .mode = spec->mode, .lag = spec->lag};
    S.ops = fg_alloc_bytes(sizeof(ScheduledOp) * (size_t)M * stage_cap(N));
    S.stage_first = fg_alloc_bytes(sizeof(int) * M);
    S.stage_count = fg_alloc_bytes(sizeof(int) * M);
    {
        double *end_f = fg_alloc_bytes(sizeof(double) * M * N);
        fg_forward_ends(spec, end_f);
        S.fg_makespan = end_f[M * N - 1] + max_cost(spec->cost_u, M);
        fg_free(end_f);
    }
    if (spec->mode == SCHED_BP_GPIPE || spec->mode == SCHED_BP_1F1B) {
        rc = build_bp(spec, &S, err);
        S.n_sel = S.n_fit = N;
    } else {
        build_fg(spec, &S);
    }
    if (rc) {
        schedule_free(&S);
        return rc;
    }
    for (int s = 0; s < M; s++) {  // pack the stage segments together
        memmove(S.ops + S.n_ops, stage_ops(&S, s), sizeof(ScheduledOp) * (size_t)S.stage_count[s]);
        S.stage_first[s] = S.n_ops;
        S.n_ops += S.stage_count[s];
    }
    for (int i = 0; i < S.n_ops; i++) S.makespan = FG_MAX(S.makespan, S.ops[i].end);
    *out = S;
    return FG_OK;
}

void schedule_free(Schedule *s) {
    if (!s) return;
    fg_free(s->ops);
    fg_free(s->stage_first);
    fg_free(s->stage_count);
    memset(s, 0, sizeof *s);
}

ScheduleStats schedule_stats(const Schedule *S) {
    ScheduleStats st = {.makespan = S->makespan};
    double busy = 0.0, busy_f = 0.0, busy_u = 0.0, t_last_f = 0.0;
    for (int i = 0; i < S->n_ops; i++) {
        const ScheduledOp *o = &S->ops[i];
        busy += o->end - o->start;
        if (o->kind == OP_F) busy_f += o->end - o->start, t_last_f = FG_MAX(t_last_f, o->end);
        if (o->kind == OP_U) busy_u += o->end - o->start;
    }
    if (S->makespan > 0.0) st.bubble_fraction = 1.0 - busy / (S->M * S->makespan);
    if (S->mode == SCHED_FG_BP) {
        // The F and U ops are those of FG (U maybe later), so FG's idle time is known, and any
        // B time before the last F ends lies in one of its gaps.
        const double fg_idle = S->M * S->fg_makespan - busy_f - busy_u;
        double used = 0.0;
        for (int i = 0; i < S->n_ops; i++)
            if (S->ops[i].kind == OP_B)
                used += FG_MAX(0.0, FG_MIN(S->ops[i].end, t_last_f) - S->ops[i].start);
        if (fg_idle > 0.0) st.bubble_used_by_b = used / fg_idle;
    }
    return st;
}

// ---------------------------------------------------------------------------------------------
// Checking

static const char *op_name(const ScheduledOp *o, char *buf, size_t n) {
    if (o->kind == OP_U) snprintf(buf, n, "U(s=%d)", o->stage);
    else snprintf(buf, n, "%c%s(s=%d,b=%d)", o->kind == OP_F ? 'F' : 'B',
                  o->iteration_offset ? "'" : "", o->stage, o->microbatch);
    return buf;
}

// Work arrays of schedule_check: index of each F and B op in S->ops (-1: none).
typedef struct {
    int *f, *b;
    double *fg_end_f;
} CheckIndex;

static int fail_dep(FgError *err, const ScheduledOp *o, const ScheduledOp *dep) {
    char a[48], b[48];
    return fg_fail(err, FG_ERR_INTERNAL,
                   "schedule: dependency: %s starts at %g before %s ends at %g",
                   op_name(o, a, sizeof a), o->start, op_name(dep, b, sizeof b), dep->end);
}

// Per stage: well-formed ops with their costs, in execution order without overlap, each F once
// and in micro-batch order, B once for each backpropagated micro-batch and for no other, U last.
static int check_stage_lists(const Schedule *S, const ScheduleSpec *sp, CheckIndex *ix, int n_back,
                             int offset, double eps, FgError *err) {
    const int M = sp->M, N = sp->N;
    char a[48], b[48];
    int total = 0;
    for (int s = 0; s < M; s++) {
        const int first = S->stage_first[s], count = S->stage_count[s];
        if (count < 1) return fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d has no ops", s);
        if (first < 0 || first + count > S->n_ops)
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d's ops [%d, +%d) outside ops[%d]",
                           s, first, count, S->n_ops);
        total += count;
        for (int i = first; i < first + count; i++) {
            const ScheduledOp *o = &S->ops[i];
            if (o->stage != s || (int)o->kind < OP_F || (int)o->kind > OP_U ||
                (o->kind != OP_U && (o->microbatch < 0 || o->microbatch >= N)))
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: op %d in stage %d's list is malformed",
                               i, s);
            if (o->kind == OP_U && i != first + count - 1)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: U is not the last op of stage %d", s);
            if (o->kind == OP_F && o->iteration_offset != 0)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s has iteration offset %d",
                               op_name(o, a, sizeof a), o->iteration_offset);
            if (o->kind == OP_B && (o->microbatch >= n_back || o->iteration_offset != offset))
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: %s (offset %d) is not a selected B op (micro-batches "
                               "0..%d, offset %d)",
                               op_name(o, a, sizeof a), o->iteration_offset, n_back - 1, offset);
            const double cost = o->kind == OP_F   ? sp->cost_f[s]
                                : o->kind == OP_B ? sp->cost_b[s]
                                                  : sp->cost_u[s];
            if (!(o->start >= -eps) || fabs(o->end - o->start - cost) > eps)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s runs [%g, %g], its cost is %g",
                               op_name(o, a, sizeof a), o->start, o->end, cost);
            if (i > first && o->start < S->ops[i - 1].end - eps)
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: overlap on stage %d: %s [%g, %g] and %s [%g, %g]", s,
                               op_name(&S->ops[i - 1], a, sizeof a), S->ops[i - 1].start,
                               S->ops[i - 1].end, op_name(o, b, sizeof b), o->start, o->end);
            if (o->kind == OP_U) continue;
            int *slot = (o->kind == OP_F ? ix->f : ix->b) + s * N + o->microbatch;
            if (*slot >= 0)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: %s appears twice on stage %d",
                               op_name(o, a, sizeof a), s);
            *slot = i;
        }
        if (S->ops[first + count - 1].kind != OP_U)
            return fg_fail(err, FG_ERR_INTERNAL, "schedule: stage %d does not end with U", s);
        for (int mb = 0; mb < N; mb++) {
            if (ix->f[s * N + mb] < 0)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: F(s=%d,b=%d) is missing", s, mb);
            if (mb > 0 && ix->f[s * N + mb] < ix->f[s * N + mb - 1])
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: stage %d runs its F ops out of micro-batch order (b=%d)",
                               s, mb);
            if (mb < n_back && ix->b[s * N + mb] < 0)
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: selected micro-batch %d is not backpropagated on stage %d",
                               mb, s);
        }
    }
    if (total != S->n_ops)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: stages hold %d ops, n_ops = %d", total,
                       S->n_ops);
    return FG_OK;
}

static int check_impl(const Schedule *S, const ScheduleSpec *sp, CheckIndex *ix, FgError *err) {
    const int M = sp->M, N = sp->N;
    const int bp = sp->mode == SCHED_BP_GPIPE || sp->mode == SCHED_BP_1F1B;
    const double eps = 1e-9 * S->makespan;
    char a[48];
    if (sp->mode == SCHED_FG_BP &&
        (S->n_sel < 0 || S->n_sel > N || (sp->n_sel >= 0 && S->n_sel != sp->n_sel)))
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: n_sel = %d does not match the spec's %d",
                       S->n_sel, sp->n_sel);
    // Which micro-batches must be backpropagated, and with which iteration offset.
    const int n_back = bp ? N : sp->mode == SCHED_FG ? 0 : S->n_sel;
    const int offset = sp->mode == SCHED_FG_BP ? -sp->lag : 0;
    int rc = check_stage_lists(S, sp, ix, n_back, offset, eps, err);
    if (rc) return rc;

    // Dependencies.
    const ScheduledOp *last_f = &S->ops[ix->f[(M - 1) * N + N - 1]], *latest_b = NULL;
    for (int i = 0; i < S->n_ops; i++) {
        const ScheduledOp *o = &S->ops[i], *dep = NULL, *stash = NULL;
        const int s = o->stage, mb = o->microbatch;
        if (o->kind == OP_F && s > 0) dep = &S->ops[ix->f[(s - 1) * N + mb]];
        if (o->kind == OP_B) {
            // A lag-1 op's F ran in the previous iteration: only the chain from s+1 applies.
            if (s < M - 1) dep = &S->ops[ix->b[(s + 1) * N + mb]];
            else if (o->iteration_offset == 0) dep = &S->ops[ix->f[s * N + mb]];  // the loss
            if (o->iteration_offset == 0) stash = &S->ops[ix->f[s * N + mb]];
            if (!latest_b || o->end > latest_b->end) latest_b = o;
        }
        if (dep && o->start < dep->end - eps) return fail_dep(err, o, dep);
        if (stash && o->start < stash->end - eps) return fail_dep(err, o, stash);
    }
    for (int s = 0; s < M && !bp; s++) {  // in bp modes U(s) only follows its stage's last B
        const ScheduledOp *u = &S->ops[S->stage_first[s] + S->stage_count[s] - 1];
        if (u->start < last_f->end - eps) return fail_dep(err, u, last_f);  // needs every d_b
        if (latest_b && u->start < latest_b->end - eps) return fail_dep(err, u, latest_b);  // c.v_b
    }

    // Mode-specific shape.
    for (int s = 0; s < M; s++) {
        const ScheduledOp *ops = S->ops + S->stage_first[s];
        int in_flight = 0, seen_b = 0;
        for (int i = 0; i < S->stage_count[s]; i++) {
            const ScheduledOp *o = &ops[i];
            const double fg_end = o->kind == OP_F ? ix->fg_end_f[s * N + o->microbatch] : 0.0;
            if (o->kind == OP_F && !bp && fabs(o->end - fg_end) > eps)
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: %s moved relative to FG: ends at %g, not %g",
                               op_name(o, a, sizeof a), o->end, fg_end);
            if (o->kind == OP_F && sp->mode == SCHED_BP_GPIPE && seen_b)
                return fg_fail(err, FG_ERR_INTERNAL, "schedule: GPipe stage %d runs %s after a B op",
                               s, op_name(o, a, sizeof a));
            seen_b |= o->kind == OP_B;
            in_flight += o->kind == OP_F ? 1 : o->kind == OP_B ? -1 : 0;
            if (sp->mode == SCHED_BP_1F1B && in_flight > M - s)
                return fg_fail(err, FG_ERR_INTERNAL,
                               "schedule: 1F1B stage %d holds %d micro-batches, more than M-s = %d", s,
                               in_flight, M - s);
        }
    }
    double end = 0.0;
    for (int i = 0; i < S->n_ops; i++) end = FG_MAX(end, S->ops[i].end);
    if (fabs(end - S->makespan) > eps)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: makespan %g, but the last op ends at %g",
                       S->makespan, end);
    return FG_OK;
}

int schedule_check(const Schedule *S, const ScheduleSpec *spec, FgError *err) {
    const int rc_spec = validate(spec, err);
    if (rc_spec) return rc_spec;
    if (!S || !S->ops || !S->stage_first || !S->stage_count)
        return fg_fail(err, FG_ERR_INTERNAL, "schedule: empty schedule");
    if (S->M != spec->M || S->N != spec->N || S->mode != spec->mode || S->lag != spec->lag)
        return fg_fail(err, FG_ERR_INTERNAL,
                       "schedule: built for M=%d N=%d %s lag %d, spec has M=%d N=%d %s lag %d", S->M,
                       S->N, schedule_mode_name(S->mode), S->lag, spec->M, spec->N,
                       schedule_mode_name(spec->mode), spec->lag);
    const int MN = spec->M * spec->N;
    CheckIndex ix = {fg_alloc_bytes(sizeof(int) * MN), fg_alloc_bytes(sizeof(int) * MN),
                     fg_alloc_bytes(sizeof(double) * MN)};
    for (int i = 0; i < MN; i++) ix.f[i] = ix.b[i] = -1;
    fg_forward_ends(spec, ix.fg_end_f);
    const int rc = check_impl(S, spec, &ix, err);
    fg_free(ix.f);
    fg_free(ix.b);
    fg_free(ix.fg_end_f);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Chrome trace

static void write_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

int schedule_write_chrome_traces(const Schedule *const *scheds, const char *const *labels, int n,
                                 FILE *f, FgError *err) {
    if (!scheds || !f || n < 1) return fg_fail(err, FG_ERR_INPUT, "schedule trace: nothing to write");
    fputs("{\"traceEvents\":[", f);
    int first = 1;
    for (int t = 0; t < n; t++) {
        const Schedule *S = scheds[t];
        const char *label = labels && labels[t] ? labels[t] : schedule_mode_name(S->mode);
        // Metadata events name the process (one per timeline) and its tracks (one per stage).
        fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":",
                first ? "" : ",", t);
        write_json_string(f, label);
        fputs("}}", f);
        first = 0;
        for (int s = 0; s < S->M; s++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"stage %d\"}}", t, s, s);
        for (int i = 0; i < S->n_ops; i++) {
            const ScheduledOp *o = &S->ops[i];
            char name[32];
            if (o->kind == OP_U) snprintf(name, sizeof name, "U");
            else snprintf(name, sizeof name, "%c%d%s", o->kind == OP_F ? 'F' : 'B', o->microbatch,
                          o->iteration_offset ? "'" : "");
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":", name);
            write_json_string(f, label);
            fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                       "\"args\":{\"stage\":%d,\"microbatch\":%d,\"iteration_offset\":%d}}",
                    t, o->stage, o->start * 1e6, (o->end - o->start) * 1e6, o->stage, o->microbatch,
                    o->iteration_offset);
        }
    }
    const Schedule *S = scheds[0];
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"label\":", f);
    write_json_string(f, labels && labels[0] ? labels[0] : schedule_mode_name(S->mode));
    fprintf(f, ",\"mode\":\"%s\",\"stages\":%d,\"microbatches\":%d,\"n_sel\":%d,\"lag\":%d}}\n",
            schedule_mode_name(S->mode), S->M, S->N, S->n_sel, S->lag);
    if (ferror(f)) return fg_fail(err, FG_ERR_INTERNAL, "schedule trace: write failed");
    return FG_OK;
}

int schedule_write_chrome_trace(const Schedule *S, FILE *f, const char *label, FgError *err) {
    if (!S) return fg_fail(err, FG_ERR_INPUT, "schedule trace: schedule or file is NULL");
    return schedule_write_chrome_traces(&S, &label, 1, f, err);
}
