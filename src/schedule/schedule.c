// The schedule builder's frame: the spec, and FG's and the bp modes' timetables. fg+bp's
// chains are schedule_fill.c's; both build on schedule_timetable.c, which also reads and
// measures a finished timetable.
#include "schedule_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *schedule_mode_name(ScheduleMode mode) {
    switch (mode) {
    case SCHED_BP_GPIPE: return "bp-gpipe";
    case SCHED_BP_1F1B: return "bp-1f1b";
    case SCHED_BP_ZB: return "bp-zb";
    case SCHED_FG: return "fg";
    case SCHED_FG_BP: return "fg+bp";
    }
    return "?";
}

int schedule_fixed_corrections(const Schedule *s) {
    return s->mode != SCHED_FG_BP ? s->N : s->select >= 0 ? s->select : 0;
}

const char *op_kind_name(OpKind kind) {
    static const char *const names[] = {"F", "B", "Bi", "Bw", "U"};
    return (int)kind >= OP_F && (int)kind <= OP_U ? names[kind] : "?";
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

int schedule_validate(const ScheduleSpec *sp, FgError *err) {
    if (!sp) return fg_fail(err, FG_ERR_INPUT, "schedule: spec is NULL");
    if (sp->M < 1 || sp->M > SCHED_MAX_STAGES)
        return fg_fail(err, FG_ERR_INPUT, "schedule: M (stages) = %d, must be 1..%d", sp->M,
                       SCHED_MAX_STAGES);
    if (sp->N < 1 || sp->N > SCHED_MAX_MICROBATCHES)
        return fg_fail(err, FG_ERR_INPUT, "schedule: N (micro-batches) = %d, must be 1..%d", sp->N,
                       SCHED_MAX_MICROBATCHES);
    if ((int)sp->mode < SCHED_BP_GPIPE || (int)sp->mode > SCHED_BP_ZB)
        return fg_fail(err, FG_ERR_INPUT, "schedule: mode = %d is not a ScheduleMode",
                       (int)sp->mode);
    if (sp->mode == SCHED_FG_BP) {
        if (sp->lag < 0 || sp->lag > SCHED_MAX_LAG)
            return fg_fail(err, FG_ERR_INPUT, "schedule: lag = %d, must be 0..%d", sp->lag,
                           SCHED_MAX_LAG);
        if (sp->select < -1 || sp->select > sp->N)
            return fg_fail(err, FG_ERR_INPUT,
                           "schedule: select = %d, must be 0..N (%d) or -1 (auto)", sp->select,
                           sp->N);
    } else if (sp->lag != 0) {
        return fg_fail(err, FG_ERR_INPUT, "schedule: lag = %d, only mode fg+bp has a lag (mode %s)",
                       sp->lag, schedule_mode_name(sp->mode));
    }
    int rc = check_costs(sp->cost_f, "cost_f", sp->M, 0, err);
    if (!rc && sp->mode != SCHED_FG) rc = check_costs(sp->cost_bi, "cost_bi", sp->M, 0, err);
    if (!rc && sp->mode != SCHED_FG) rc = check_costs(sp->cost_bw, "cost_bw", sp->M, 0, err);
    if (!rc) rc = check_costs(sp->cost_u, "cost_u", sp->M, 1, err);
    return rc;
}

double schedule_planned_cost(const ScheduleSpec *sp, const ScheduledOp *o) {
    switch (o->kind) {
    case OP_F: return sp->cost_f[o->stage];
    case OP_B: return sp->cost_bi[o->stage] + sp->cost_bw[o->stage];
    case OP_BI: return sp->cost_bi[o->stage];
    case OP_BW: return timetable_cost_bw(sp, o->stage);
    case OP_U: return sp->cost_u[o->stage];
    }
    return 0.0;
}

const char *schedule_op_name(const ScheduledOp *o, char *buf, size_t n) {
    if (o->kind == OP_U) snprintf(buf, n, "U(s=%d)", o->stage);
    else snprintf(buf, n, "%s(s=%d,b=%d,lag=%d)", op_kind_name(o->kind), o->stage, o->microbatch,
                  o->lag);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// The bp modes: a planned op order per stage, each op placed as soon as its stage is free and
// its inputs have arrived.

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
        order[n++] = (Slot){OP_U, -1};
        return n;
    }
    // PipeDream-flush (Narayanan et al.): stage s keeps at most M-s micro-batches in flight.
    // ZB-H1 runs Bi where 1F1B runs B, and Bw s micro-batches later: stage s's cool-down waits
    // about s adjoint hops at the end, which its s deferred Bw ops fill.
    const int zb = sp->mode == SCHED_BP_ZB, warm = FG_MIN(sp->M - s - 1, N);
    for (int b = 0; b < warm; b++) order[n++] = (Slot){OP_F, b};
    for (int b = 0; b < N; b++) {
        if (warm + b < N) order[n++] = (Slot){OP_F, warm + b};
        order[n++] = (Slot){zb ? OP_BI : OP_B, b};
        if (zb && b >= s) order[n++] = (Slot){OP_BW, b - s};
    }
    for (int b = FG_MAX(N - s, 0); zb && b < N; b++) order[n++] = (Slot){OP_BW, b};
    order[n++] = (Slot){OP_U, -1};
    return n;
}

// When op o of stage s may start, or -1 while what it needs is not placed yet. end_b: the
// ends of the B (or Bi) ops, which carry the adjoint.
static double bp_ready(const ScheduleSpec *sp, int s, Slot o, const double *end_f,
                       const double *end_b) {
    const int M = sp->M, N = sp->N;
    switch (o.kind) {
    case OP_F: return s > 0 ? end_f[(s - 1) * N + o.b] : 0.0;
    case OP_B:
    case OP_BI:
        if (end_f[s * N + o.b] < 0.0) return -1.0;  // its stash does not exist yet
        return s < M - 1 ? end_b[(s + 1) * N + o.b] : end_f[s * N + o.b];
    case OP_BW: return end_b[s * N + o.b];
    case OP_U: return 0.0;
    }
    return -1.0;
}

// Passes over the stages until all ops are placed; a pass without progress means the orders
// wait on each other (a bug in bp_order).
static int build_bp(const ScheduleSpec *sp, Build *bd, FgError *err) {
    const int M = sp->M, N = sp->N, cap = bd->cap;
    Slot *order = fg_alloc_bytes(sizeof(Slot) * (size_t)M * cap);
    int *n_order = fg_alloc_bytes(sizeof(int) * M), *next = fg_alloc_bytes(sizeof(int) * M);
    double *end_f = fg_alloc_bytes(sizeof(double) * M * N);
    double *end_b = fg_alloc_bytes(sizeof(double) * M * N);
    double *free_at = fg_alloc_bytes(sizeof(double) * M);
    int remaining = 0, rc = FG_OK;
    for (int i = 0; i < M * N; i++) end_f[i] = end_b[i] = -1.0;  // not placed yet
    for (int s = 0; s < M; s++) remaining += n_order[s] = bp_order(sp, s, order + (size_t)s * cap);
    while (remaining > 0 && !rc) {
        int progress = 0;
        for (int s = 0; s < M; s++) {
            while (next[s] < n_order[s]) {
                const Slot o = order[(size_t)s * cap + next[s]];
                const double dep = bp_ready(sp, s, o, end_f, end_b);
                if (dep < 0.0) break;
                ScheduledOp op = {o.kind, s, o.b, 0, FG_MAX(free_at[s], dep), 0.0};
                op.end = op.start + schedule_planned_cost(sp, &op);
                timetable_segment(bd, 0, s)[(*timetable_segment_count(bd, 0, s))++] = op;
                free_at[s] = op.end;
                if (o.kind == OP_F) end_f[s * N + o.b] = op.end;
                if (o.kind == OP_B || o.kind == OP_BI) end_b[s * N + o.b] = op.end;
                next[s]++;
                remaining--;
                progress = 1;
            }
        }
        if (!progress)
            rc = fg_fail(err, FG_ERR_INTERNAL, "schedule: %s op orders deadlock (%d ops unplaced)",
                         schedule_mode_name(sp->mode), remaining);
    }
    // The last F ends later than FG's: the B ops run in between.
    bd->S->last_f = 0.0;
    for (int i = 0; i < M * N; i++) bd->S->last_f = FG_MAX(bd->S->last_f, end_f[i]);
    fg_free(order);
    fg_free(n_order);
    fg_free(next);
    fg_free(end_f);
    fg_free(end_b);
    fg_free(free_at);
    return rc;
}

int schedule_build(const ScheduleSpec *spec, Schedule *out, FgError *err) {
    if (out) memset(out, 0, sizeof *out);
    int rc = schedule_validate(spec, err);
    if (rc) return rc;
    if (!out) return fg_fail(err, FG_ERR_INPUT, "schedule: out is NULL");
    if (spec->mode == SCHED_FG_BP) return schedule_fill_chains(spec, out, err);
    Build b;
    double *end_f = fg_alloc_bytes(sizeof(double) * (size_t)spec->M * spec->N);
    timetable_fg_ends(spec, end_f);
    timetable_build_start(&b, spec, 1, 3 * spec->N + 1, end_f, out);
    fg_free(end_f);
    if (schedule_is_bp(spec->mode)) rc = build_bp(spec, &b, err);
    else timetable_build_updates(&b, spec);
    if (rc) {
        schedule_free(out);
        return rc;
    }
    schedule_pack(&b);
    return FG_OK;
}

int schedule_build_clearing(const ScheduleSpec *spec, const double *cost_zero, Schedule *out,
                            FgError *err) {
    int rc = schedule_build(spec, out, err);
    if (rc || spec->mode != SCHED_FG_BP || !cost_zero) return rc;
    double bw[SCHED_MAX_STAGES];
    int changed = 0;
    for (int s = 0; s < spec->M; s++) {
        const double per_step = (double)schedule_stage_bubbles(out, s).corrections / out->n_phases;
        bw[s] = spec->cost_bw[s];
        if (per_step > 0 && cost_zero[s] > 0) bw[s] += cost_zero[s] / per_step, changed = 1;
    }
    if (!changed) return FG_OK;
    ScheduleSpec folded = *spec;
    folded.cost_bw = bw;
    schedule_free(out);
    return schedule_build(&folded, out, err);
}
