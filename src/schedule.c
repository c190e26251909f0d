// The schedule builder's frame: the spec, FG's and the bp modes' timetables, the segments every
// mode builds in, and the statistics. fg+bp's chains are schedule_fill.c's.
#include "schedule_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *schedule_mode_name(ScheduleMode mode) {
    switch (mode) {
    case SCHED_BP_GPIPE: return "bp-gpipe";
    case SCHED_BP_1F1B: return "bp-1f1b";
    case SCHED_FG: return "fg";
    case SCHED_FG_BP: return "fg+bp";
    }
    return "?";
}

const char *op_kind_name(OpKind kind) {
    static const char *const names[] = {"F", "B", "Bi", "Bw", "U"};
    return (int)kind >= OP_F && (int)kind <= OP_U ? names[kind] : "?";
}

int schedule_is_bp(ScheduleMode mode) { return mode == SCHED_BP_GPIPE || mode == SCHED_BP_1F1B; }

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
    if ((int)sp->mode < SCHED_BP_GPIPE || (int)sp->mode > SCHED_FG_BP)
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

double planned_op_cost(const ScheduleSpec *sp, const ScheduledOp *o) {
    switch (o->kind) {
    case OP_F: return sp->cost_f[o->stage];
    case OP_B: return sp->cost_bi[o->stage] + sp->cost_bw[o->stage];
    case OP_BI: return sp->cost_bi[o->stage];
    case OP_BW: return sp->cost_bw[o->stage];
    case OP_U: return sp->cost_u[o->stage];
    }
    return 0.0;
}

const char *op_name(const ScheduledOp *o, char *buf, size_t n) {
    if (o->kind == OP_U) snprintf(buf, n, "U(s=%d)", o->stage);
    else snprintf(buf, n, "%s(s=%d,b=%d,lag=%d)", op_kind_name(o->kind), o->stage, o->microbatch,
                  o->lag);
    return buf;
}

// Each F starts as soon as its input has arrived and the stage has finished the micro-batch
// before.
double fg_forward_start(const double *end_f, int N, int s, int b) {
    double t = 0.0;
    if (s > 0) t = end_f[(s - 1) * N + b];
    if (b > 0) t = FG_MAX(t, end_f[s * N + b - 1]);
    return t;
}

void fg_forward_ends(const ScheduleSpec *sp, double *end_f) {
    for (int s = 0; s < sp->M; s++)
        for (int b = 0; b < sp->N; b++)
            end_f[s * sp->N + b] = fg_forward_start(end_f, sp->N, s, b) + sp->cost_f[s];
}

void fg_forward_latest_ends(const ScheduleSpec *sp, double *end_f) {
    const int M = sp->M, N = sp->N;
    fg_forward_ends(sp, end_f);
    const double last_f = end_f[M * N - 1];
    for (int s = M - 1; s >= 0; s--)
        for (int b = N - 1; b >= 0; b--) {
            double t = last_f;
            if (b < N - 1) t = FG_MIN(t, end_f[s * N + b + 1] - sp->cost_f[s]);
            if (s < M - 1) t = FG_MIN(t, end_f[(s + 1) * N + b] - sp->cost_f[s + 1]);
            end_f[s * N + b] = t;
        }
}

static double max_cost(const double *c, int M) {
    double m = 0.0;
    for (int s = 0; s < M; s++) m = FG_MAX(m, c[s]);
    return m;
}

// ---------------------------------------------------------------------------------------------
// Segments

ScheduledOp *segment(const Build *b, int phase, int s) {
    return b->S->ops + (size_t)(phase * b->S->M + s) * b->cap;
}

int *segment_count(const Build *b, int phase, int s) {
    return &b->S->stage_count[phase * b->S->M + s];
}

void segment_insert(const Build *b, int phase, int s, int pos, ScheduledOp op) {
    ScheduledOp *ops = segment(b, phase, s);
    int *n = segment_count(b, phase, s);
    memmove(ops + pos + 1, ops + pos, sizeof(ScheduledOp) * (size_t)(*n - pos));
    ops[pos] = op;
    (*n)++;
}

void segment_remove(const Build *b, int phase, int s, const ScheduledOp *op) {
    ScheduledOp *ops = segment(b, phase, s);
    int *n = segment_count(b, phase, s);
    for (int i = 0; i < *n; i++)
        if (ops[i].kind == op->kind && ops[i].microbatch == op->microbatch && ops[i].lag == op->lag) {
            memmove(ops + i, ops + i + 1, sizeof(ScheduledOp) * (size_t)(*n - i - 1));
            (*n)--;
            return;
        }
}

double earliest_gap(const ScheduledOp *ops, int n, double ready, double c, double limit, int *pos) {
    int lo = 0, hi = n;  // first op that ends after ready: earlier ones cannot bound the gap
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ops[mid].end <= ready) lo = mid + 1;
        else hi = mid;
    }
    double t = ready;
    for (int i = lo; i < n; i++) {
        if (t + c <= ops[i].start) break;
        t = FG_MAX(t, ops[i].end);
        lo = i + 1;
    }
    *pos = lo;
    return t + c <= limit * (1 + 1e-12) ? t : -1.0;
}

void build_start(Build *b, const ScheduleSpec *sp, int n_phases, int cap, const double *end_f,
                 Schedule *S) {
    const int M = sp->M, N = sp->N;
    *S = (Schedule){.M = M, .N = N, .mode = sp->mode, .lag = sp->lag, .select = sp->select,
                    .n_phases = n_phases};
    S->ops = fg_alloc_bytes(sizeof(ScheduledOp) * (size_t)n_phases * M * cap);
    S->stage_first = fg_alloc_bytes(sizeof(int) * (size_t)n_phases * M);
    S->stage_count = fg_alloc_bytes(sizeof(int) * (size_t)n_phases * M);
    *b = (Build){S, cap};
    S->last_f = end_f[M * N - 1];
    S->fg_makespan = S->last_f + max_cost(sp->cost_u, M);
    if (!schedule_is_bp(sp->mode))
        for (int p = 0; p < n_phases; p++)
            for (int s = 0; s < M; s++)
                for (int mb = 0; mb < N; mb++)
                    segment(b, p, s)[(*segment_count(b, p, s))++] = (ScheduledOp){
                        OP_F, s, mb, 0, end_f[s * N + mb] - sp->cost_f[s], end_f[s * N + mb]};
}

// U(s) starts when the last stage has ended its last F (then all d_b are known; the scalar
// allreduce costs 0 here) and every B op on every stage has ended: the same allreduce carries
// each stage's part of c . v_b. Each stage then applies its own update.
void build_updates(Build *b, const ScheduleSpec *sp) {
    const Schedule *S = b->S;
    for (int p = 0; p < S->n_phases; p++) {
        double t = 0.0;
        for (int s = 0; s < S->M; s++) {
            const int n = *segment_count(b, p, s);
            if (n) t = FG_MAX(t, segment(b, p, s)[n - 1].end);
        }
        for (int s = 0; s < S->M; s++)
            segment(b, p, s)[(*segment_count(b, p, s))++] =
                (ScheduledOp){OP_U, s, -1, 0, t, t + sp->cost_u[s]};
    }
}

void schedule_pack(Build *b) {
    Schedule *S = b->S;
    for (int i = 0; i < S->n_phases * S->M; i++) {
        memmove(S->ops + S->n_ops, S->ops + (size_t)i * b->cap,
                sizeof(ScheduledOp) * (size_t)S->stage_count[i]);
        S->stage_first[i] = S->n_ops;
        S->n_ops += S->stage_count[i];
    }
    for (int i = 0; i < S->n_ops; i++) S->makespan = FG_MAX(S->makespan, S->ops[i].end);
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
                double dep = 0.0;
                if (o.kind == OP_F && s > 0) dep = end_f[(s - 1) * N + o.b];
                if (o.kind == OP_B) {
                    dep = s < M - 1 ? end_b[(s + 1) * N + o.b] : end_f[s * N + o.b];
                    if (end_f[s * N + o.b] < 0.0) dep = -1.0;  // its stash does not exist yet
                }
                if (dep < 0.0) break;
                ScheduledOp op = {o.kind, s, o.b, 0, FG_MAX(free_at[s], dep), 0.0};
                op.end = op.start + planned_op_cost(sp, &op);
                segment(bd, 0, s)[(*segment_count(bd, 0, s))++] = op;
                free_at[s] = op.end;
                if (o.kind == OP_F) end_f[s * N + o.b] = op.end;
                if (o.kind == OP_B) end_b[s * N + o.b] = op.end;
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
    if (spec->mode == SCHED_FG_BP) return build_chains(spec, out, err);
    Build b;
    double *end_f = fg_alloc_bytes(sizeof(double) * (size_t)spec->M * spec->N);
    fg_forward_ends(spec, end_f);
    build_start(&b, spec, 1, 2 * spec->N + 1, end_f, out);
    fg_free(end_f);
    if (schedule_is_bp(spec->mode)) rc = build_bp(spec, &b, err);
    else build_updates(&b, spec);
    if (rc) {
        schedule_free(out);
        return rc;
    }
    schedule_pack(&b);
    return FG_OK;
}

void schedule_free(Schedule *s) {
    if (!s) return;
    fg_free(s->ops);
    fg_free(s->stage_first);
    fg_free(s->stage_count);
    memset(s, 0, sizeof *s);
}

int schedule_stage_ops(const Schedule *S, int phase, int stage, const ScheduledOp **first) {
    const int i = phase * S->M + stage;
    *first = S->ops + S->stage_first[i];
    return S->stage_count[i];
}

int schedule_source_phase(const Schedule *S, int phase, int lag) {
    return ((phase - lag) % S->n_phases + S->n_phases) % S->n_phases;
}

const ScheduledOp *schedule_chain_op(const Schedule *S, OpKind kind, int source, int b, int stage) {
    for (int q = 0; q < S->n_phases; q++) {
        const ScheduledOp *ops;
        const int n = schedule_stage_ops(S, q, stage, &ops);
        for (int i = 0; i < n; i++)
            if (ops[i].kind == kind && ops[i].microbatch == b &&
                schedule_source_phase(S, q, ops[i].lag) == source)
                return &ops[i];
    }
    return NULL;
}

int schedule_stashes(const Schedule *S, int phase, int stage, int b) {
    return schedule_is_bp(S->mode) || schedule_chain_op(S, OP_BI, phase, b, stage);
}

// B time before the last F, and FG's idle time before the last F, of one stage over the phases.
void stage_fill(const Schedule *S, int s, double *used, double *idle) {
    *used = *idle = 0.0;
    for (int p = 0; p < S->n_phases; p++) {
        const ScheduledOp *ops;
        const int n = schedule_stage_ops(S, p, s, &ops);
        double busy_f = 0.0;
        for (int i = 0; i < n; i++) {
            const ScheduledOp *o = &ops[i];
            if (o->kind == OP_F) busy_f += o->end - o->start;
            if (o->kind == OP_B || o->kind == OP_BI || o->kind == OP_BW)
                *used += FG_MAX(0.0, FG_MIN(o->end, S->last_f) - o->start);
        }
        *idle += S->last_f - busy_f;
    }
}

ScheduleStats schedule_stats(const Schedule *S) {
    ScheduleStats st = {.makespan = S->makespan};
    double busy = 0.0;
    for (int i = 0; i < S->n_ops; i++) busy += S->ops[i].end - S->ops[i].start;
    if (S->makespan > 0.0) st.bubble_fraction = 1.0 - busy / (S->n_phases * S->M * S->makespan);
    if (S->mode == SCHED_FG_BP) {
        double used = 0.0, idle = 0.0;
        for (int s = 0; s < S->M; s++) {
            double u, i;
            stage_fill(S, s, &u, &i);
            used += u, idle += i;
        }
        if (idle > 0.0) st.bubble_used_by_b = used / idle;
    }
    return st;
}
