// The timetable, below every builder (schedule.c's FG and bp, schedule_fill.c's fg+bp
// chains): while building, F ops placed as FG runs them, a segment of ops per phase and stage,
// idle gaps, op U, and packing the segments into the Schedule; once built, its queries and
// statistics.
#include "schedule_internal.h"

#include <stdlib.h>
#include <string.h>

int schedule_is_bp(ScheduleMode mode) {
    return mode == SCHED_BP_GPIPE || mode == SCHED_BP_1F1B || mode == SCHED_BP_ZB;
}

double timetable_cost_bw(const ScheduleSpec *sp, int s) {
    return sp->cost_bw[s] + (sp->bw_redoes_bi ? sp->cost_bi[s] : 0.0);
}

// Each F starts as soon as its input has arrived and the stage has finished the micro-batch
// before.
double timetable_fg_start(const double *end_f, int N, int s, int b) {
    double t = 0.0;
    if (s > 0) t = end_f[(s - 1) * N + b];
    if (b > 0) t = FG_MAX(t, end_f[s * N + b - 1]);
    return t;
}

void timetable_fg_ends(const ScheduleSpec *sp, double *end_f) {
    for (int s = 0; s < sp->M; s++)
        for (int b = 0; b < sp->N; b++)
            end_f[s * sp->N + b] = timetable_fg_start(end_f, sp->N, s, b) + sp->cost_f[s];
}

void timetable_fg_latest_ends(const ScheduleSpec *sp, double *end_f) {
    const int M = sp->M, N = sp->N;
    timetable_fg_ends(sp, end_f);
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

ScheduledOp *timetable_segment(const Build *b, int phase, int s) {
    return b->S->ops + (size_t)(phase * b->S->M + s) * b->cap;
}

int *timetable_segment_count(const Build *b, int phase, int s) {
    return &b->S->stage_count[phase * b->S->M + s];
}

void timetable_segment_insert(const Build *b, int phase, int s, int pos, ScheduledOp op) {
    ScheduledOp *ops = timetable_segment(b, phase, s);
    int *n = timetable_segment_count(b, phase, s);
    memmove(ops + pos + 1, ops + pos, sizeof(ScheduledOp) * (size_t)(*n - pos));
    ops[pos] = op;
    (*n)++;
}

void timetable_segment_remove(const Build *b, int phase, int s, const ScheduledOp *op) {
    ScheduledOp *ops = timetable_segment(b, phase, s);
    int *n = timetable_segment_count(b, phase, s);
    for (int i = 0; i < *n; i++)
        if (ops[i].kind == op->kind && ops[i].microbatch == op->microbatch && ops[i].lag == op->lag) {
            memmove(ops + i, ops + i + 1, sizeof(ScheduledOp) * (size_t)(*n - i - 1));
            (*n)--;
            return;
        }
}

double timetable_earliest_gap(const ScheduledOp *ops, int n, double ready, double c, double limit, int *pos) {
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

void timetable_build_start(Build *b, const ScheduleSpec *sp, int n_phases, int cap, const double *end_f,
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
                    timetable_segment(b, p, s)[(*timetable_segment_count(b, p, s))++] = (ScheduledOp){
                        OP_F, s, mb, 0, end_f[s * N + mb] - sp->cost_f[s], end_f[s * N + mb]};
}

// U(s) starts when the last stage has ended its last F (then all d_b are known; the scalar
// allreduce costs 0 here) and every B op on every stage has ended: the same allreduce carries
// each stage's part of c . v_b. Each stage then applies its own update.
void timetable_build_updates(Build *b, const ScheduleSpec *sp) {
    const Schedule *S = b->S;
    for (int p = 0; p < S->n_phases; p++) {
        double t = 0.0;
        for (int s = 0; s < S->M; s++) {
            const int n = *timetable_segment_count(b, p, s);
            if (n) t = FG_MAX(t, timetable_segment(b, p, s)[n - 1].end);
        }
        for (int s = 0; s < S->M; s++)
            timetable_segment(b, p, s)[(*timetable_segment_count(b, p, s))++] =
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

void schedule_free(Schedule *s) {
    if (!s) return;
    fg_free(s->ops);
    fg_free(s->stage_first);
    fg_free(s->stage_count);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------------------------
// Reading a built timetable

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
void timetable_stage_fill(const Schedule *S, int s, double *used, double *idle) {
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
            timetable_stage_fill(S, s, &u, &i);
            used += u, idle += i;
        }
        if (idle > 0.0) st.bubble_used_by_b = used / idle;
    }
    return st;
}

// ---------------------------------------------------------------------------------------------
// Per stage: what its backward ops keep and fill

// Most of the intervals [lo, hi) (repeating every `period`) that hold at once.
static int most_at_once(const double *lo, const double *hi, int n, double period) {
    int most = 0;
    for (int i = 0; i < n; i++) {
        int count = 0;
        for (int j = 0; j < n; j++)
            for (int k = -4; k <= 4; k++)  // a lifetime spans at most lag + 1 <= 3 steps
                count += lo[j] + k * period <= lo[i] && lo[i] < hi[j] + k * period;
        most = FG_MAX(most, count);
    }
    return most;
}

StageBubbles schedule_stage_bubbles(const Schedule *S, int s) {
    StageBubbles r = {0};
    if (S->mode == SCHED_FG) return r;
    const double T = S->makespan, period = S->n_phases * T;
    const int cap = S->n_phases * S->N;
    double *stash_lo = malloc(sizeof(double) * (size_t)cap), *stash_hi = malloc(sizeof(double) * (size_t)cap);
    double *kept_lo = malloc(sizeof(double) * (size_t)cap), *kept_hi = malloc(sizeof(double) * (size_t)cap);
    int n = 0;
    for (int p = 0; p < S->n_phases; p++) {
        const ScheduledOp *ops, *f_ops;
        const int count = schedule_stage_ops(S, p, s, &ops);
        for (int i = 0; i < count; i++) {
            if (ops[i].kind != OP_BW && ops[i].kind != OP_B) continue;
            const ScheduledOp *bw = &ops[i];  // the stash's last use
            const int source = schedule_source_phase(S, p, bw->lag);
            const int n_f = schedule_stage_ops(S, source, s, &f_ops);
            double f_start = 0.0;
            for (int j = 0; j < n_f; j++)
                if (f_ops[j].kind == OP_F && f_ops[j].microbatch == bw->microbatch) f_start = f_ops[j].start;
            const ScheduledOp *bi = schedule_chain_op(S, OP_BI, source, bw->microbatch, s);
            const double bi_end = bi ? source * T + bi->lag * T + bi->end : 0.0;  // B: no Bi
            // Unrolled time, the source step starting at source * T.
            stash_lo[n] = source * T + f_start, stash_hi[n] = source * T + bw->lag * T + bw->end;
            kept_lo[n] = bw->kind == OP_B ? stash_hi[n] : bi_end, kept_hi[n] = stash_hi[n];
            r.corrections++;
            r.max_lag = FG_MAX(r.max_lag, bw->lag);
            n++;
        }
        for (int i = 0; i < count; i++)
            if (ops[i].kind == OP_BI) r.max_lag = FG_MAX(r.max_lag, ops[i].lag);
    }
    r.stashes = most_at_once(stash_lo, stash_hi, n, period);
    r.kept = most_at_once(kept_lo, kept_hi, n, period);
    free(stash_lo), free(stash_hi), free(kept_lo), free(kept_hi);
    double used, idle;
    timetable_stage_fill(S, s, &used, &idle);
    r.bubble_used = S->mode == SCHED_FG_BP && idle > 0.0 ? used / idle : 0.0;
    return r;
}
