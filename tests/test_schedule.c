// Pipeline schedule builder: spec validation, the invariants of every timetable (checked by
// schedule_check and again independently here: order, durations, F ops at FG's times, Bi/Bw
// pairs, nested adjoint chains, dependencies in unrolled time, lags, link order, auto never
// lengthening the step, explicit selection, stash bounds), the bubble share fg+bp fills, that
// schedule_check catches corrupted timetables, the Chrome trace and schedule_stashes.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "schedule.h"
#include "test_util.h"

// ---------------------------------------------------------------------------------------------
// Helpers

typedef struct {
    double f[SCHED_MAX_STAGES], bi[SCHED_MAX_STAGES], bw[SCHED_MAX_STAGES], u[SCHED_MAX_STAGES];
} Costs;

// Cost sets: uniform with Bi = Bw = F, uniform with Bi = Bw = F/2 (both with a free update),
// random per stage with Bi, Bw around F, the same with a costly update, and uneven stages with
// costs in steps of 1/4 (F 1..4, Bi and Bw 0.5..3, U 0.25: sums exact, many ties).
enum { COSTS_EQUAL, COSTS_HALF, COSTS_RANDOM, COSTS_RANDOM_U, COSTS_STEPS, N_COSTS };
static const char *const cost_names[N_COSTS] = {"Bi=Bw=F", "Bi=Bw=F/2", "random", "random+U",
                                               "steps"};

static void make_costs(Costs *c, int kind, int M, uint64_t seed) {
    Rng r = {seed * 7919 + (uint64_t)kind};
    for (int s = 0; s < M; s++) {
        if (kind == COSTS_EQUAL || kind == COSTS_HALF) {
            c->f[s] = 1.0, c->u[s] = 0.0;
            c->bi[s] = c->bw[s] = kind == COSTS_EQUAL ? 1.0 : 0.5;
        } else if (kind == COSTS_STEPS) {
            c->f[s] = rng_int(&r, 1, 4), c->u[s] = 0.25;
            c->bi[s] = 0.5 * rng_int(&r, 1, 6), c->bw[s] = 0.5 * rng_int(&r, 1, 6);
        } else {
            c->f[s] = rng_range(&r, 0.5, 1.5);
            c->bi[s] = c->f[s] * rng_range(&r, 0.6, 1.4);
            c->bw[s] = c->f[s] * rng_range(&r, 0.6, 1.4);
            c->u[s] = kind == COSTS_RANDOM_U ? rng_range(&r, 0.05, 0.5) : 0.0;
        }
    }
}

// fg gets no Bi/Bw costs: it needs none.
static ScheduleSpec spec_of(const Costs *c, int M, int N, ScheduleMode mode, int lag, int select) {
    const int fg = mode == SCHED_FG;
    return (ScheduleSpec){M, N, mode, lag, select, c->f, fg ? NULL : c->bi, fg ? NULL : c->bw,
                          c->u, 0};
}

#define SPEC_FMT "M=%d N=%d %s lag %d select %d"
#define SPEC_ARGS(sp) (sp)->M, (sp)->N, schedule_mode_name((sp)->mode), (sp)->lag, (sp)->select

static void build_ok(const ScheduleSpec *sp, Schedule *S) {
    FgError err = {0};
    if (schedule_build(sp, S, &err) != FG_OK)
        fail_msg("build (" SPEC_FMT "): %s", SPEC_ARGS(sp), err.msg);
    if (schedule_check(S, sp, &err) != FG_OK)
        fail_msg("check (" SPEC_FMT "): %s", SPEC_ARGS(sp), err.msg);
}

// cmocka before 1.1.6 has no assert_double_equal.
#define assert_near(a, b, tol) assert_near_at((a), (b), (tol), #a, __LINE__)
static void assert_near_at(double a, double b, double tol, const char *what, int line) {
    if (!(fabs(a - b) <= tol))
        fail_msg("line %d: %s = %.17g, expected %.17g (+- %g)", line, what, a, b, tol);
}

static int is_backward(OpKind k) { return k == OP_B || k == OP_BI || k == OP_BW; }

// The cost table restated here, not schedule_planned_cost(): the durations are checked independently.
static double cost_of(const ScheduleSpec *sp, const ScheduledOp *o) {
    switch (o->kind) {
    case OP_F: return sp->cost_f[o->stage];
    case OP_B: return sp->cost_bi[o->stage] + sp->cost_bw[o->stage];
    case OP_BI: return sp->cost_bi[o->stage];
    case OP_BW: return sp->cost_bw[o->stage];
    case OP_U: return sp->cost_u[o->stage];
    }
    return -1.0;
}

static int mod(int a, int n) { return (a % n + n) % n; }

// The op of phase p, stage s of this kind and micro-batch (and lag, for lag >= 0), or NULL.
static const ScheduledOp *find_op(const Schedule *S, int p, int s, OpKind kind, int b, int lag) {
    const ScheduledOp *ops;
    const int n = schedule_stage_ops(S, p, s, &ops);
    for (int i = 0; i < n; i++)
        if (ops[i].kind == kind && ops[i].microbatch == b && (lag < 0 || ops[i].lag == lag))
            return &ops[i];
    return NULL;
}

// FG's F end times from the recurrence: F(s,b) starts once F(s-1,b) and F(s,b-1) have ended.
static void fg_ends(const ScheduleSpec *sp, double *end) {
    const int M = sp->M, N = sp->N;
    for (int s = 0; s < M; s++)
        for (int b = 0; b < N; b++) {
            double t = 0.0;
            if (s > 0 && end[(s - 1) * N + b] > t) t = end[(s - 1) * N + b];
            if (b > 0 && end[s * N + b - 1] > t) t = end[s * N + b - 1];
            end[s * N + b] = t + sp->cost_f[s];
        }
}

// ---------------------------------------------------------------------------------------------
// The fg+bp chains, gathered from the ops: chain (source phase, b) on stage s.

typedef struct {
    int P, M, N;
    const ScheduledOp **bi, **bw;  // [(src * N + b) * M + s], or NULL
} Chains;

static size_t chain_at(const Chains *C, int src, int b, int s) {
    return ((size_t)src * C->N + b) * C->M + s;
}

static void chains_gather(const Schedule *S, Chains *C) {
    const int P = S->n_phases, M = S->M, N = S->N;
    const size_t n = (size_t)P * N * M;
    *C = (Chains){P, M, N, calloc(n, sizeof *C->bi), calloc(n, sizeof *C->bw)};
    for (int p = 0; p < P; p++)
        for (int s = 0; s < M; s++) {
            const ScheduledOp *ops;
            const int count = schedule_stage_ops(S, p, s, &ops);
            for (int i = 0; i < count; i++) {
                const ScheduledOp *o = &ops[i];
                if (o->kind != OP_BI && o->kind != OP_BW) continue;
                const size_t k = chain_at(C, mod(p - o->lag, P), o->microbatch, s);
                const ScheduledOp **slot = o->kind == OP_BI ? &C->bi[k] : &C->bw[k];
                if (*slot)
                    fail_msg("M=%d N=%d: %s(s=%d,b=%d) of source phase %d twice", M, N,
                             op_kind_name(o->kind), s, o->microbatch, mod(p - o->lag, P));
                *slot = o;
            }
        }
}

static void chains_free(Chains *C) { free(C->bi), free(C->bw); }

// Most of the periodic intervals [lo + k period, hi + k period) alive at once; the count at
// x of interval j is the number of integers k in ((x - hi)/period, (x - lo)/period].
static int most_alive(const double *lo, const double *hi, int n, double period) {
    int most = 0;
    for (int i = 0; i < n; i++) {
        int count = 0;
        for (int j = 0; j < n; j++)
            count += (int)(floor((lo[i] - lo[j]) / period) - floor((lo[i] - hi[j]) / period));
        if (count > most) most = count;
    }
    return most;
}

// fg+bp: the chains' invariants, and what each stage gets (StageBubbles) recomputed.
static void verify_chains(const ScheduleSpec *sp, const Schedule *S, int exact_costs) {
    const int M = S->M, N = S->N, P = S->n_phases, auto_sel = sp->select < 0;
    const double Tfg = S->fg_makespan, T = S->makespan;  // unrolled deps; the step's length
    const double eps = 1e-9 * (S->makespan > 1.0 ? S->makespan : 1.0);
    Chains C;
    chains_gather(S, &C);
    int per_source[3] = {0}, n_chains = 0, n_fit = 0;
    for (int src = 0; src < P; src++)
        for (int b = 0; b < N; b++) {
            int fits = 1, reaches = 0;
            for (int s = 0; s < M; s++) {
                const size_t k = chain_at(&C, src, b, s);
                const ScheduledOp *bi = C.bi[k], *bw = C.bw[k];
                if (!bi != !bw)
                    fail_msg(SPEC_FMT ": stage %d: chain (%d, %d) has %s without %s", SPEC_ARGS(sp),
                             s, src, b, bi ? "Bi" : "Bw", bi ? "Bw" : "Bi");
                if (!bi) {
                    fits = 0;
                    continue;
                }
                if (s == 0) reaches = 1;
                if (s < M - 1 && !C.bi[chain_at(&C, src, b, s + 1)])
                    fail_msg(SPEC_FMT ": chain (%d, %d) on stage %d but not on %d", SPEC_ARGS(sp),
                             src, b, s, s + 1);
                for (int w = 0; w < 2; w++) {
                    const ScheduledOp *o = w ? bw : bi;
                    if (auto_sel ? o->lag > sp->lag : o->lag != sp->lag)
                        fail_msg(SPEC_FMT ": %s(s=%d,b=%d) has lag %d", SPEC_ARGS(sp),
                                 op_kind_name(o->kind), s, b, o->lag);
                    if (auto_sel && o->end > S->last_f + eps)
                        fail_msg(SPEC_FMT ": %s(s=%d,b=%d) ends at %g after the last F (%g)",
                                 SPEC_ARGS(sp), op_kind_name(o->kind), s, b, o->end, S->last_f);
                    fits &= o->end <= S->last_f + eps;
                }
                // Unrolled time from the start of the source step; F ran in the source step.
                const double bi_start = bi->lag * Tfg + bi->start, bi_end = bi->lag * Tfg + bi->end;
                const ScheduledOp *f = find_op(S, src, s, OP_F, b, 0);
                const ScheduledOp *loss = find_op(S, src, M - 1, OP_F, b, 0);
                assert_true(bi_start >= f->end - eps);
                assert_true(bi_start >= loss->end - eps);
                if (s < M - 1) {
                    const ScheduledOp *up = C.bi[chain_at(&C, src, b, s + 1)];
                    if (bi_start < up->lag * Tfg + up->end - eps)
                        fail_msg(SPEC_FMT ": Bi(s=%d,b=%d) starts before Bi(s=%d) ends",
                                 SPEC_ARGS(sp), s, b, s + 1);
                }
                assert_true(bw->lag * Tfg + bw->start >= bi_end - eps);
            }
            if (C.bi[chain_at(&C, src, b, M - 1)]) per_source[src]++, n_chains++;
            n_fit += reaches && fits;
            if (!auto_sel) {  // explicit: micro-batches 0..select-1 of the one phase, every stage
                const int want = b < sp->select;
                for (int s = 0; s < M; s++)
                    if (!C.bi[chain_at(&C, src, b, s)] != !want)
                        fail_msg(SPEC_FMT ": micro-batch %d %s on stage %d", SPEC_ARGS(sp), b,
                                 want ? "missing" : "backpropagated", s);
            }
        }
    assert_int_equal(S->n_chains, n_chains);
    int most_per_source = 0;
    for (int src = 0; src < P; src++)
        if (per_source[src] > most_per_source) most_per_source = per_source[src];
    if (!auto_sel) {
        assert_int_equal(n_chains, sp->select);
        assert_int_equal(S->n_fit, n_fit);
        // n_fit == select exactly when the step is no longer than FG's
        assert_int_equal(S->n_fit == sp->select, fabs(S->makespan - S->fg_makespan) <= eps);
    } else {
        assert_near(S->makespan, S->fg_makespan, eps);
        if (n_chains > 0) assert_true(schedule_stats(S).bubble_used_by_b > 0.0);
    }

    // Link order: over the periodic timeline (step k runs phase k mod P and lasts T), stage s
    // runs its Bi ops in the order stage s+1 sent the adjoints, also across periods.
    const size_t n_max = (size_t)P * N;
    double *up = malloc(sizeof(double) * n_max), *down = malloc(sizeof(double) * n_max);
    for (int s = 0; s < M - 1; s++) {
        int n = 0;
        for (int src = 0; src < P; src++)
            for (int b = 0; b < N; b++) {
                const ScheduledOp *d = C.bi[chain_at(&C, src, b, s)];
                if (!d) continue;
                const ScheduledOp *u = C.bi[chain_at(&C, src, b, s + 1)];
                up[n] = (src + u->lag) * T + u->start;
                down[n++] = (src + d->lag) * T + d->start;
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                for (int k = -6; k <= 6 && i != j; k++) {  // periods apart
                    const double x = up[i] - up[j] + k * P * T, y = down[i] - down[j] + k * P * T;
                    if ((x > 0) != (y > 0))
                        fail_msg(SPEC_FMT ": stage %d receives adjoints out of stage %d's order",
                                 SPEC_ARGS(sp), s, s + 1);
                }
    }
    free(up), free(down);

    // Per stage: corrections, lags, stashes (F to Bw) and kept adjoints (Bi to Bw).
    double *lo = malloc(sizeof(double) * n_max), *hi = malloc(sizeof(double) * n_max);
    double *klo = malloc(sizeof(double) * n_max), *khi = malloc(sizeof(double) * n_max);
    for (int s = 0; s < M; s++) {
        const StageBubbles sb = schedule_stage_bubbles(S, s);
        int n = 0, max_lag = 0;
        for (int src = 0; src < P; src++)
            for (int b = 0; b < N; b++) {
                const size_t k = chain_at(&C, src, b, s);
                const ScheduledOp *bi = C.bi[k], *bw = C.bw[k];
                if (!bw) continue;
                lo[n] = src * T + find_op(S, src, s, OP_F, b, 0)->start;
                hi[n] = khi[n] = (src + bw->lag) * T + bw->end;
                klo[n] = (src + bi->lag) * T + bi->end;
                max_lag = FG_MAX(max_lag, FG_MAX(bi->lag, bw->lag));
                n++;
            }
        assert_int_equal(sb.corrections, n);
        assert_int_equal(sb.max_lag, max_lag);
        if (sb.stashes > (sp->lag + 1) * most_per_source)
            fail_msg(SPEC_FMT ": stage %d holds %d stashes, more than (lag + 1) x %d",
                     SPEC_ARGS(sp), s, sb.stashes, most_per_source);
        assert_true(sb.kept <= sb.stashes);
        assert_int_equal(sb.stashes > 0, n > 0);
        assert_true(sb.bubble_used >= 0.0 && sb.bubble_used <= 1.0 + 1e-9);
        if (exact_costs) {  // no rounding at the ends of the lifetimes: the counts agree
            assert_int_equal(sb.stashes, most_alive(lo, hi, n, P * T));
            assert_int_equal(sb.kept, most_alive(klo, khi, n, P * T));
        }
    }
    free(lo), free(hi), free(klo), free(khi);
    chains_free(&C);
}

// The bp modes: every B(s,b) once, after F(s,b) and B(s+1,b) (the loss: F(M-1,b)); GPipe runs
// its B ops after all F, last micro-batch first; 1F1B holds at most M-s micro-batches.
static void verify_bp(const ScheduleSpec *sp, const Schedule *S) {
    const int M = S->M, N = S->N;
    const double eps = 1e-9 * (S->makespan > 1.0 ? S->makespan : 1.0);
    for (int s = 0; s < M; s++) {
        const ScheduledOp *ops;
        const int n = schedule_stage_ops(S, 0, s, &ops);
        int in_flight = 0, most = 0, seen_b = 0, last_b = N;
        for (int i = 0; i < n; i++) {
            const ScheduledOp *o = &ops[i];
            assert_true(o->kind == OP_F || o->kind == OP_B || o->kind == OP_U);
            assert_int_equal(o->lag, 0);
            if (o->kind == OP_F && s > 0)
                assert_true(o->start >= find_op(S, 0, s - 1, OP_F, o->microbatch, 0)->end - eps);
            if (o->kind == OP_B) {
                const int b = o->microbatch;
                assert_true(o->start >= find_op(S, 0, s, OP_F, b, 0)->end - eps);
                const ScheduledOp *dep =
                    s < M - 1 ? find_op(S, 0, s + 1, OP_B, b, 0) : find_op(S, 0, s, OP_F, b, 0);
                assert_non_null(dep);
                assert_true(o->start >= dep->end - eps);
                if (sp->mode == SCHED_BP_GPIPE) assert_int_equal(b, last_b - 1);
                last_b = b;
            }
            if (sp->mode == SCHED_BP_GPIPE && o->kind == OP_F) assert_false(seen_b);
            seen_b |= o->kind == OP_B;
            in_flight += o->kind == OP_F ? 1 : o->kind == OP_B ? -1 : 0;
            most = FG_MAX(most, in_flight);
        }
        assert_int_equal(in_flight, 0);
        for (int b = 0; b < N; b++) assert_non_null(find_op(S, 0, s, OP_B, b, 0));
        if (sp->mode == SCHED_BP_GPIPE) assert_int_equal(most, N);
        else assert_int_equal(most, FG_MIN(N, M - s));
    }
}

// Everything again, written independently of schedule_check. fg is the FG timetable of the same
// costs; exact_costs: costs whose sums are exact in binary.
static void verify_independently(const ScheduleSpec *sp, const Schedule *S, const Schedule *fg,
                                 int exact_costs) {
    const int M = sp->M, N = sp->N, P = S->n_phases;
    const int bp = sp->mode == SCHED_BP_GPIPE || sp->mode == SCHED_BP_1F1B;
    const double eps = 1e-9 * (S->makespan > 1.0 ? S->makespan : 1.0);
    assert_int_equal(S->M, M);
    assert_int_equal(S->N, N);
    assert_int_equal(S->mode, sp->mode);
    assert_int_equal(S->lag, sp->lag);
    assert_int_equal(S->select, sp->select);
    if (sp->mode != SCHED_FG_BP) assert_int_equal(P, 1);
    else assert_true(P >= 1 && P <= (sp->select < 0 ? sp->lag + 1 : 1));

    double *end_f = malloc(sizeof(double) * (size_t)M * N);
    fg_ends(sp, end_f);
    const double last_f = end_f[M * N - 1];
    double u_max = 0.0;
    for (int s = 0; s < M; s++) u_max = FG_MAX(u_max, sp->cost_u[s]);
    assert_near(S->fg_makespan, last_f + u_max, eps);
    if (!bp) assert_near(S->last_f, last_f, eps);
    if (fg) assert_near(S->fg_makespan, fg->makespan, 0.0);

    int total = 0;
    double makespan = 0.0, busy = 0.0, used = 0.0, idle = 0.0, latest_f = 0.0;
    for (int p = 0; p < P; p++) {
        double ends_before_u = 0.0;  // the last F or B op of the phase
        for (int s = 0; s < M; s++) {
            const ScheduledOp *ops;
            const int n = schedule_stage_ops(S, p, s, &ops);
            assert_ptr_equal(ops, S->ops + S->stage_first[p * M + s]);
            assert_int_equal(S->stage_first[p * M + s], total);  // grouped by phase, then stage
            total += n;
            int next_f = 0;
            double busy_f = 0.0;
            for (int i = 0; i < n; i++) {
                const ScheduledOp *o = &ops[i];
                assert_int_equal(o->stage, s);
                assert_true((o->kind == OP_U) == (i == n - 1));  // U once, last
                if (sp->mode == SCHED_FG) assert_true(o->kind == OP_F || o->kind == OP_U);
                if (sp->mode == SCHED_FG_BP) assert_true(o->kind != OP_B);
                if (bp) assert_true(o->kind != OP_BI && o->kind != OP_BW);
                if (o->kind == OP_F || o->kind == OP_U) assert_int_equal(o->lag, 0);
                assert_int_equal(o->microbatch < 0, o->kind == OP_U);
                assert_true(o->microbatch < N);
                assert_true(o->start >= -eps);
                if (fabs(o->end - o->start - cost_of(sp, o)) > eps)
                    fail_msg(SPEC_FMT ": %s(s=%d,b=%d) runs [%g, %g], costs %g", SPEC_ARGS(sp),
                             op_kind_name(o->kind), s, o->microbatch, o->start, o->end,
                             cost_of(sp, o));
                if (i > 0 && o->start < ops[i - 1].end - eps)
                    fail_msg(SPEC_FMT ": phase %d stage %d: op %d overlaps op %d", SPEC_ARGS(sp),
                             p, s, i, i - 1);
                if (o->kind == OP_F) {
                    assert_int_equal(o->microbatch, next_f++);
                    busy_f += o->end - o->start;
                    latest_f = FG_MAX(latest_f, o->end);
                    if (!bp) {
                        // Not before FG has it, the last one where FG has it, after its input,
                        // and where phase 0 has it.
                        assert_true(o->end >= end_f[s * N + o->microbatch] - eps);
                        if (s == M - 1 && o->microbatch == N - 1) assert_near(o->end, last_f, eps);
                        if (s > 0) {
                            const ScheduledOp *in = find_op(S, p, s - 1, OP_F, o->microbatch, 0);
                            assert_true(o->start >= in->end - eps);
                        }
                        const ScheduledOp *first = find_op(S, 0, s, OP_F, o->microbatch, 0);
                        assert_true(o->start == first->start && o->end == first->end);
                        // Explicit selections keep FG's timetable itself.
                        if (fg && sp->select >= 0) {
                            const ScheduledOp *x = find_op(fg, 0, s, OP_F, o->microbatch, 0);
                            assert_true(o->start == x->start && o->end == x->end);
                        }
                    }
                }
                if (o->kind != OP_U) ends_before_u = FG_MAX(ends_before_u, o->end);
                if (is_backward(o->kind)) used += FG_MAX(0.0, FG_MIN(o->end, S->last_f) - o->start);
                busy += o->end - o->start;
                makespan = FG_MAX(makespan, o->end);
            }
            assert_int_equal(next_f, N);
            idle += S->last_f - busy_f;
        }
        // U waits for every F and B op of its phase on every stage (bp: its own stage's).
        for (int s = 0; s < M && !bp; s++) {
            const ScheduledOp *ops;
            const int n = schedule_stage_ops(S, p, s, &ops);
            assert_true(ops[n - 1].start >= ends_before_u - eps);
        }
    }
    assert_int_equal(total, S->n_ops);
    assert_near(S->makespan, makespan, 0.0);
    assert_near(S->last_f, latest_f, 0.0);
    const ScheduleStats st = schedule_stats(S);
    assert_near(st.makespan, S->makespan, 0.0);
    assert_near(st.bubble_fraction, 1.0 - busy / (P * M * S->makespan), 1e-9);
    const double want_used = sp->mode == SCHED_FG_BP && idle > 0.0 ? used / idle : 0.0;
    assert_near(st.bubble_used_by_b, want_used, 1e-9);

    // Uniform costs: FG takes (N+M-1) F + U, GPipe and 1F1B (N+M-1)(F+Bi+Bw) + U.
    int uniform = 1;
    for (int s = 1; s < M; s++)
        uniform &= sp->cost_f[s] == sp->cost_f[0] && sp->cost_u[s] == sp->cost_u[0] &&
                   (sp->mode == SCHED_FG ||
                    (sp->cost_bi[s] == sp->cost_bi[0] && sp->cost_bw[s] == sp->cost_bw[0]));
    if (uniform) {
        const double step = sp->cost_f[0] + (bp ? sp->cost_bi[0] + sp->cost_bw[0] : 0.0);
        if (sp->mode != SCHED_FG_BP)
            assert_near(S->makespan, (N + M - 1) * step + sp->cost_u[0], eps);
        assert_near(S->fg_makespan, (N + M - 1) * sp->cost_f[0] + sp->cost_u[0], eps);
    }

    if (bp) verify_bp(sp, S);
    if (sp->mode == SCHED_FG_BP) verify_chains(sp, S, exact_costs);
    else assert_int_equal(S->n_chains, 0);
    // fg backpropagates nothing; bp every micro-batch, holding GPipe all, 1F1B M-s stashes.
    for (int s = 0; s < M && sp->mode != SCHED_FG_BP; s++) {
        const StageBubbles sb = schedule_stage_bubbles(S, s);
        assert_true(sb.corrections == (bp ? N : 0) && sb.kept == 0 && sb.max_lag == 0);
        assert_int_equal(sb.stashes, sp->mode == SCHED_FG ? 0 : sp->mode == SCHED_BP_GPIPE ? N : FG_MIN(M - s, N));
    }
    free(end_f);
}

// ---------------------------------------------------------------------------------------------
// 1. Spec validation

static void expect_spec_error(ScheduleSpec sp, const char *needle) {
    Schedule S;
    memset(&S, 0x5a, sizeof S);  // left empty on error, whatever it held
    FgError err = {0};
    assert_int_equal(schedule_build(&sp, &S, &err), FG_ERR_INPUT);
    assert_int_equal(err.code, FG_ERR_INPUT);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(S.ops);
    assert_null(S.stage_first);
    assert_int_equal(S.n_ops, 0);
    assert_int_equal(schedule_build(&sp, &S, NULL), FG_ERR_INPUT);  // no err: still refused
}

static void test_spec_errors(void **state) {
    (void)state;
    Costs c;
    make_costs(&c, COSTS_EQUAL, 4, 1);
    expect_spec_error(spec_of(&c, 0, 8, SCHED_FG, 0, 0), "M (stages) = 0");
    expect_spec_error(spec_of(&c, 65, 8, SCHED_FG, 0, 0), "M (stages) = 65");
    expect_spec_error(spec_of(&c, 4, 0, SCHED_FG_BP, 0, 0), "N (micro-batches) = 0");
    expect_spec_error(spec_of(&c, 4, 1025, SCHED_FG, 0, 0), "N (micro-batches) = 1025");
    expect_spec_error(spec_of(&c, 4, 8, (ScheduleMode)7, 0, 0), "mode = 7");
    expect_spec_error(spec_of(&c, 4, 8, (ScheduleMode)-1, 0, 0), "mode = -1");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 3, -1), "lag = 3, must be 0..2");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, -1, -1), "lag = -1, must be 0..2");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_BP_1F1B, 1, 0), "only mode fg+bp has a lag");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_BP_GPIPE, 2, 0), "only mode fg+bp has a lag");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG, 1, 0), "lag = 1, only mode fg+bp");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 0, 9), "select = 9");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 1, -2), "select = -2");
    ScheduleSpec sp = spec_of(&c, 4, 8, SCHED_FG_BP, 1, -1);
    sp.cost_f = NULL;
    expect_spec_error(sp, "cost_f is NULL");
    sp = spec_of(&c, 4, 8, SCHED_BP_GPIPE, 0, 0);
    sp.cost_bi = NULL;
    expect_spec_error(sp, "cost_bi is NULL");
    sp = spec_of(&c, 4, 8, SCHED_FG_BP, 2, -1);
    sp.cost_bw = NULL;
    expect_spec_error(sp, "cost_bw is NULL");
    sp = spec_of(&c, 4, 8, SCHED_FG, 0, 0);
    sp.cost_u = NULL;
    expect_spec_error(sp, "cost_u is NULL");
    c.f[2] = 0.0;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG, 0, 0), "cost_f[2] = 0");
    c.f[2] = INFINITY;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG, 0, 0), "cost_f[2] = inf");
    c.f[2] = 1.0, c.bi[3] = -0.5;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_BP_1F1B, 0, 0), "cost_bi[3] = -0.5");
    c.bi[3] = 1.0, c.bw[1] = 0.0;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 0, -1), "cost_bw[1] = 0");
    c.bw[1] = NAN;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_BP_GPIPE, 0, 0), "cost_bw[1]");
    c.bw[1] = 1.0, c.u[0] = -1.0;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG, 0, 0), "cost_u[0] = -1");
    c.u[0] = 0.0;  // a free update is fine

    // fg needs no Bi/Bw costs (spec_of passes NULL), not even invalid ones are looked at
    Schedule S;
    c.bi[0] = -1.0;
    sp = spec_of(&c, 4, 8, SCHED_FG, 0, 0);
    build_ok(&sp, &S);
    schedule_free(&S);
    assert_null(S.ops);
    c.bi[0] = 1.0;
    // the limits themselves are fine, select 0 and N too
    sp = spec_of(&c, 1, 1, SCHED_FG_BP, 2, 1);
    build_ok(&sp, &S);
    schedule_free(&S);
    sp = spec_of(&c, 4, 8, SCHED_FG_BP, 0, 0);
    build_ok(&sp, &S);
    schedule_free(&S);
    sp = spec_of(&c, 4, 8, SCHED_FG_BP, 0, 8);
    build_ok(&sp, &S);
    schedule_free(&S);

    FgError err = {0};
    assert_int_equal(schedule_build(NULL, &S, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "spec is NULL"));
    assert_int_equal(schedule_build(&sp, NULL, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "out is NULL"));
    schedule_free(NULL);
}

// ---------------------------------------------------------------------------------------------
// 2. Timetable invariants

static const int Ms[] = {1, 2, 3, 4, 5, 8}, Ns[] = {1, 2, 3, 4, 8, 16, 32, 64};
enum { N_MS = sizeof Ms / sizeof Ms[0], N_NS = sizeof Ns / sizeof Ns[0] };

static void test_timetables(void **state) {
    (void)state;
    int n_built = 0, n_auto = 0, n_auto_chains = 0;
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++)
            for (int kind = 0; kind < N_COSTS; kind++) {
                const int M = Ms[im], N = Ns[in];
                const int exact = kind == COSTS_EQUAL || kind == COSTS_HALF || kind == COSTS_STEPS;
                Costs c;
                make_costs(&c, kind, M, (uint64_t)(M * 100 + N));
                const ScheduleSpec fg_spec = spec_of(&c, M, N, SCHED_FG, 0, 0);
                Schedule fg;
                build_ok(&fg_spec, &fg);
                verify_independently(&fg_spec, &fg, NULL, exact);
                for (int mode = SCHED_BP_GPIPE; mode <= SCHED_FG_BP; mode++)
                    for (int lag = 0; lag <= (mode == SCHED_FG_BP ? SCHED_MAX_LAG : 0); lag++)
                        for (int k = 0; k < (mode == SCHED_FG_BP ? 5 : 1); k++) {
                            static const int sel_of[5] = {-1, 0, 1, -2, -3};  // -2: N/2, -3: N
                            int select = mode == SCHED_FG_BP ? sel_of[k] : 0;
                            if (select == -2) select = N / 2;
                            if (select == -3) select = N;
                            const ScheduleSpec sp =
                                spec_of(&c, M, N, (ScheduleMode)mode, lag, select);
                            Schedule S;
                            build_ok(&sp, &S);
                            verify_independently(&sp, &S, &fg, exact);
                            if (mode == SCHED_FG_BP && select < 0) {
                                n_auto++;
                                n_auto_chains += S.n_chains > 0;
                            }
                            schedule_free(&S);
                            n_built++;
                        }
                schedule_free(&fg);
            }
    printf("# %d timetables built and verified; auto fg+bp found chains in %d of %d\n", n_built,
           n_auto_chains, n_auto);
}

// Stashes per stage do not grow with N under auto selection: the same at N = 32 and N = 64.
static void test_stashes_independent_of_n(void **state) {
    (void)state;
    for (int im = 0; im < N_MS; im++)
        for (int kind = COSTS_EQUAL; kind <= COSTS_HALF; kind++)
            for (int lag = 0; lag <= SCHED_MAX_LAG; lag++) {
                const int M = Ms[im];
                Costs c;
                make_costs(&c, kind, M, 0);
                const ScheduleSpec a = spec_of(&c, M, 32, SCHED_FG_BP, lag, -1);
                const ScheduleSpec b = spec_of(&c, M, 64, SCHED_FG_BP, lag, -1);
                Schedule A, B;
                build_ok(&a, &A);
                build_ok(&b, &B);
                for (int s = 0; s < M; s++) {
                    const StageBubbles x = schedule_stage_bubbles(&A, s);
                    const StageBubbles y = schedule_stage_bubbles(&B, s);
                    if (x.stashes != y.stashes)
                        fail_msg("M=%d %s lag %d stage %d: %d stashes at N=32, %d at N=64", M,
                                 cost_names[kind], lag, s, x.stashes, y.stashes);
                }
                schedule_free(&A);
                schedule_free(&B);
            }
}

// Uneven stages, where a round-robin chain misses the last stage: the chain after it must still
// wait for the chains before (it used to overtake them on the last stage and arrive out of
// order on stage 0). Odd N from 15 on did that with these costs.
static void test_link_order_uneven_stages(void **state) {
    (void)state;
    static const double f[7] = {3, 1, 1, 2, 1, 2, 2}, bi[7] = {1.5, 1, 1.5, 2, 3, 2, 1},
                        bw[7] = {1, 1, 1, 2, 2, 2, 0.5};
    Costs c;
    for (int s = 0; s < 7; s++) c.f[s] = f[s], c.bi[s] = bi[s], c.bw[s] = bw[s], c.u[s] = 0.25;
    for (int N = 1; N <= 30; N++)
        for (int lag = 0; lag <= SCHED_MAX_LAG; lag++) {
            const ScheduleSpec fg_spec = spec_of(&c, 7, N, SCHED_FG, 0, 0);
            const ScheduleSpec sp = spec_of(&c, 7, N, SCHED_FG_BP, lag, -1);
            Schedule fg, S;
            build_ok(&fg_spec, &fg);
            build_ok(&sp, &S);
            verify_independently(&sp, &S, &fg, 1);
            schedule_free(&S);
            schedule_free(&fg);
        }
}

// Random specs from a fixed seed: any M up to 12, N up to 40, mode, lag, select and costs.
static void test_random_specs(void **state) {
    (void)state;
    Rng r = {20261123};
    for (int it = 0; it < 1500; it++) {
        const int M = rng_int(&r, 1, 12), N = rng_int(&r, 1, 40);
        const int draw = rng_int(&r, 0, 5);  // fg+bp thrice as often
        const ScheduleMode mode = (ScheduleMode)(draw < SCHED_FG_BP ? draw : SCHED_FG_BP);
        const int lag = mode == SCHED_FG_BP ? rng_int(&r, 0, SCHED_MAX_LAG) : 0;
        const int select = mode != SCHED_FG_BP ? 0 : rng_int(&r, 0, 2) ? -1 : rng_int(&r, 0, N);
        const int steps = rng_int(&r, 0, 1);
        const double spread = rng_range(&r, 0.1, 2.0);
        Costs c;
        for (int s = 0; s < M; s++) {
            if (steps) {
                c.f[s] = rng_int(&r, 1, 4);
                c.bi[s] = 0.5 * rng_int(&r, 1, 6), c.bw[s] = 0.5 * rng_int(&r, 1, 6);
                c.u[s] = 0.25 * rng_int(&r, 0, 2);
            } else {
                c.f[s] = rng_range(&r, 0.3, 2.0);
                c.bi[s] = c.f[s] * rng_range(&r, 0.1, 0.1 + spread);
                c.bw[s] = c.f[s] * rng_range(&r, 0.1, 0.1 + spread);
                c.u[s] = rng_range(&r, 0.0, 1.0);
            }
        }
        const ScheduleSpec fg_spec = spec_of(&c, M, N, SCHED_FG, 0, 0);
        const ScheduleSpec sp = spec_of(&c, M, N, mode, lag, select);
        Schedule fg, S;
        build_ok(&fg_spec, &fg);
        build_ok(&sp, &S);
        verify_independently(&sp, &S, &fg, steps);
        schedule_free(&S);
        schedule_free(&fg);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. What fg+bp fills with uniform costs

static void test_bubble_used(void **state) {
    (void)state;
    Costs c;
    make_costs(&c, COSTS_EQUAL, SCHED_MAX_STAGES, 0);
    printf("# fg+bp auto, F = Bi = Bw = 1, U = 0; per stage corrections/lag/stashes\n");
    printf("# %3s %3s %3s %6s %6s %6s  %s\n", "lag", "M", "N", "phases", "chains", "used",
           "stages");
    for (int lag = 1; lag <= 2; lag++)
        for (int im = 0; im < 2; im++)
            for (int in = 0; in < 2; in++) {
                const int M = im ? 8 : 4, N = in ? 32 : 8;
                const ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, lag, -1);
                Schedule S;
                build_ok(&sp, &S);
                const double used = schedule_stats(&S).bubble_used_by_b;
                char line[512];
                int len = 0;
                for (int s = 0; s < M; s++) {
                    const StageBubbles sb = schedule_stage_bubbles(&S, s);
                    len += snprintf(line + len, sizeof line - (size_t)len, " %d/%d/%d",
                                    sb.corrections, sb.max_lag, sb.stashes);
                }
                printf("# %3d %3d %3d %6d %6d %6.3f %s\n", lag, M, N, S.n_phases, S.n_chains, used,
                       line);
                if (lag == 2 && used < 0.90)
                    fail_msg("M=%d N=%d lag 2: B ops fill %.3f of the bubble, expected >= 0.90", M,
                             N, used);
                schedule_free(&S);
            }
}

// A stage a little faster than the one before idles a little after each F: gaps too short for
// a B op. Run as late as they can, its F ops gather that time before the first F, where B ops
// fit: the builder does so when it fills more (M = 2, F 1 and 0.9, N = 32; with F ops as soon
// as they can, 0.29 of the bubble).
static void test_late_forward_gathers_gaps(void **state) {
    (void)state;
    const int M = 2, N = 32;
    Costs c = {.f = {1.0, 0.9}, .bi = {0.25, 0.225}, .bw = {0.25, 0.225}, .u = {0.5, 0.5}};
    const ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, 2, -1);
    Schedule S;
    build_ok(&sp, &S);
    const double used = schedule_stats(&S).bubble_used_by_b;
    const ScheduledOp *first = find_op(&S, 0, 1, OP_F, 0, 0);
    printf("# M=2 N=32 F 1/0.9: %.3f of the bubble used, stage 1's first F at %g (fg: 1)\n", used,
           first->start);
    if (used < 0.8) fail_msg("B ops fill %.3f of the bubble, expected >= 0.8", used);
    assert_true(first->start > 1.0 + 1e-9);
    assert_near(S.makespan, S.fg_makespan, 1e-9);
    schedule_free(&S);
}

// Auto corrects every stage when some candidate does: the candidate that fills most of the
// bubble may leave the first stage, whose only idle time is the drain, without a chain (costs of
// the bubble benchmark's M = 2, N = 32 run, ms: 0.29 of the bubble there with every stage
// corrected, against 0.77 and none on stage 0 when the fill alone decided). And it fills the
// bubble: with every chain's Bi ops placed first, stage 0's drain took two Bi ops and had no
// room left for either Bw, so at lag 1 one chain was all that reached it (0.28 of the bubble);
// Bi ops placed only where their Bw fits after them give 0.92.
static void test_auto_corrects_every_stage(void **state) {
    (void)state;
    const int M = 2, N = 32;
    Costs c = {.f = {13.33, 12.41}, .bi = {3.93, 3.34}, .bw = {5.47, 2.45}, .u = {0.0, 0.0}};
    for (int lag = 1; lag <= 2; lag++) {
        const ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, lag, -1);
        Schedule S;
        build_ok(&sp, &S);
        printf("# M=2 N=32 lag %d: %.3f of the bubble used, corrections", lag,
               schedule_stats(&S).bubble_used_by_b);
        for (int st = 0; st < M; st++) printf(" %d", schedule_stage_bubbles(&S, st).corrections);
        printf("\n");
        for (int st = 0; st < M; st++)
            if (schedule_stage_bubbles(&S, st).corrections == 0)
                fail_msg("lag %d: stage %d has no corrections", lag, st);
        if (schedule_stats(&S).bubble_used_by_b < 0.9)
            fail_msg("lag %d: %.3f of the bubble used", lag, schedule_stats(&S).bubble_used_by_b);
        schedule_free(&S);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. schedule_check catches corrupted timetables and names the broken invariant

static void expect_check_fails(const Schedule *S, const ScheduleSpec *sp, const char *needle) {
    FgError err = {0};
    assert_int_equal(schedule_check(S, sp, &err), FG_ERR_INTERNAL);
    if (!strstr(err.msg, needle)) fail_msg("check message '%s' lacks '%s'", err.msg, needle);
}

static void expect_check_ok(const Schedule *S, const ScheduleSpec *sp) {
    FgError err = {0};
    if (schedule_check(S, sp, &err) != FG_OK) fail_msg("check after restoring: %s", err.msg);
}

static ScheduledOp *op_at(Schedule *S, int p, int s, int i) {
    return &S->ops[S->stage_first[p * S->M + s] + i];
}

// Keeps a segment in start order after an op moved.
static void sort_segment(Schedule *S, int p, int s) {
    ScheduledOp *ops = op_at(S, p, s, 0);
    for (int i = 1; i < S->stage_count[p * S->M + s]; i++)
        for (int j = i; j > 0 && ops[j].start < ops[j - 1].start; j--) {
            const ScheduledOp t = ops[j];
            ops[j] = ops[j - 1], ops[j - 1] = t;
        }
}

// The start of an idle interval of length len within [lo, hi] on phase p, stage s, or -1.
static double idle_slot(Schedule *S, int p, int s, double len, double lo, double hi) {
    const ScheduledOp *ops = op_at(S, p, s, 0);
    const int n = S->stage_count[p * S->M + s];
    double t = lo;
    for (int i = 0; i < n; i++) {
        if (ops[i].end <= t) continue;
        if (t + len <= ops[i].start) break;
        t = ops[i].end;
    }
    return t + len <= hi ? t : -1.0;
}

static void test_check_detects_violations(void **state) {
    (void)state;
    const int M = 4, N = 8;
    Costs c;
    make_costs(&c, COSTS_EQUAL, M, 0);
    const ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, 2, -1);
    Schedule S;
    build_ok(&sp, &S);
    assert_true(S.n_phases == 2 && S.n_chains >= 2);
    const size_t bytes = sizeof(ScheduledOp) * (size_t)S.n_ops;
    ScheduledOp *saved = malloc(bytes);
    memcpy(saved, S.ops, bytes);
    const double T = S.fg_makespan;

    // A Bi moved into an idle slot before its upstream Bi has ended (still after its own F).
    int moved = 0;
    for (int p = 0; p < S.n_phases && !moved; p++)
        for (int s = 0; s < M - 1 && !moved; s++)
            for (int i = 0; i < S.stage_count[p * M + s] && !moved; i++) {
                ScheduledOp *o = op_at(&S, p, s, i);
                if (o->kind != OP_BI) continue;
                const int src = mod(p - o->lag, S.n_phases);
                const ScheduledOp *f = find_op(&S, src, s, OP_F, o->microbatch, 0);
                const ScheduledOp *up = NULL;
                for (int q = 0; q < S.n_phases && !up; q++) {
                    const ScheduledOp *x = find_op(&S, q, s + 1, OP_BI, o->microbatch, -1);
                    if (x && mod(q - x->lag, S.n_phases) == src) up = x;
                }
                assert_non_null(up);
                // in o's step: after F(s,b), ending before the upstream Bi ends
                const double up_end = up->lag * T + up->end - o->lag * T;
                const double lo = FG_MAX(0.0, f->end - o->lag * T);
                const double t = idle_slot(&S, p, s, c.bi[s], lo, FG_MIN(up_end - 0.5, S.last_f));
                if (t < 0.0) continue;
                char needle[64];
                snprintf(needle, sizeof needle, "dependency: Bi(s=%d,b=%d,lag=%d) starts at %g", s,
                         o->microbatch, o->lag, t);
                o->start = t, o->end = t + c.bi[s];
                sort_segment(&S, p, s);
                expect_check_fails(&S, &sp, needle);
                expect_check_fails(&S, &sp, "before Bi(s=");
                moved = 1;
            }
    assert_true(moved);
    memcpy(S.ops, saved, bytes);

    // A Bw's micro-batch changed: its pair is broken.
    for (int i = 0;; i++)
        if (op_at(&S, 0, 1, i)->kind == OP_BW) {
            ScheduledOp *o = op_at(&S, 0, 1, i);
            char needle[64];
            snprintf(needle, sizeof needle, "stage 1 has Bi of micro-batch %d", o->microbatch);
            o->microbatch = N - 1;
            expect_check_fails(&S, &sp, needle);
            expect_check_fails(&S, &sp, "without its Bw");
            break;
        }
    memcpy(S.ops, saved, bytes);

    // Two ops overlap: a B op starts half way into the op before it.
    for (int i = 1;; i++)
        if (is_backward(op_at(&S, 1, 2, i)->kind)) {
            ScheduledOp *o = op_at(&S, 1, 2, i);
            const double len = o->end - o->start;
            o->start = op_at(&S, 1, 2, i - 1)->end - 0.5, o->end = o->start + len;
            expect_check_fails(&S, &sp, "overlap on stage 2");
            break;
        }
    memcpy(S.ops, saved, bytes);

    // A B op moved past the last F (U of its stage after it): auto keeps the step FG's length.
    {
        const int n = S.stage_count[M - 1];  // phase 0, last stage
        int i = 0;
        while (op_at(&S, 0, M - 1, i)->kind != OP_BW) assert_true(++i < n - 1);  // no op needs it
        ScheduledOp *o = op_at(&S, 0, M - 1, i), *u = op_at(&S, 0, M - 1, n - 1);
        const double len = o->end - o->start;
        o->start = S.last_f + 0.5, o->end = o->start + len;
        u->start = o->end, u->end = u->start + c.u[M - 1];
        char needle[64];
        snprintf(needle, sizeof needle, "ends at %g, after the last F (%g)", o->end, S.last_f);
        sort_segment(&S, 0, M - 1);
        expect_check_fails(&S, &sp, needle);
    }
    memcpy(S.ops, saved, bytes);

    // An F op moved before FG's time, into the fill bubble of FG's own timetable (so that
    // nothing overlaps): stage 1's first F.
    {
        const ScheduleSpec fg_spec = spec_of(&c, M, N, SCHED_FG, 0, 0);
        Schedule fg;
        build_ok(&fg_spec, &fg);
        ScheduledOp *o = op_at(&fg, 0, 1, 0);
        assert_true(o->kind == OP_F && o->start >= 0.25);
        o->start -= 0.25, o->end -= 0.25;
        expect_check_fails(&fg, &fg_spec, "moved relative to FG");
        schedule_free(&fg);
    }

    // A wrong duration.
    op_at(&S, 1, 0, 0)->end += 0.5;
    expect_check_fails(&S, &sp, "its cost is");
    memcpy(S.ops, saved, bytes);

    // A lag beyond SCHED_MAX_LAG.
    for (int i = 0;; i++)
        if (op_at(&S, 1, 0, i)->kind == OP_BW) {
            op_at(&S, 1, 0, i)->lag = SCHED_MAX_LAG + 1;
            expect_check_fails(&S, &sp, "of phase 1 stage 0 is malformed");
            break;
        }
    memcpy(S.ops, saved, bytes);
    expect_check_ok(&S, &sp);
    free(saved);
    schedule_free(&S);

    // A Bw's lag beyond the spec (lag 1, one phase: the op stays in its chain).
    const ScheduleSpec sp1 = spec_of(&c, M, N, SCHED_FG_BP, 1, -1);
    build_ok(&sp1, &S);
    assert_true(S.n_phases == 1 && S.n_chains >= 1);
    const ScheduledOp *bw = find_op(&S, 0, M - 1, OP_BW, 0, -1);
    assert_non_null(bw);
    ScheduledOp *o = (ScheduledOp *)bw;
    o->lag = 2;
    expect_check_fails(&S, &sp1, "has lag 2, the spec allows <= 1");
    o->lag = 1;
    // An update before the last stage's last F: stage 0 idles at the end.
    o = op_at(&S, 0, 0, S.stage_count[0] - 1);
    o->start -= 0.5, o->end -= 0.5;
    expect_check_fails(&S, &sp1,
                       "dependency: U(s=0) starts at 10.5 before F(s=3,b=7,lag=0) ends at 11");
    o->start += 0.5, o->end += 0.5;
    expect_check_ok(&S, &sp1);
    schedule_free(&S);

    // Explicit selection: every op at the spec's lag.
    const ScheduleSpec sp2 = spec_of(&c, M, N, SCHED_FG_BP, 1, 2);
    build_ok(&sp2, &S);
    o = (ScheduledOp *)find_op(&S, 0, 1, OP_BW, 1, 1);
    assert_non_null(o);
    o->lag = 0;
    expect_check_fails(&S, &sp2, "has lag 0, the spec allows 1");
    o->lag = 1;
    expect_check_ok(&S, &sp2);
    schedule_free(&S);

    // bp: a broken dependency (GPipe's stage 0 starts its B ops before stage 1 sent the
    // adjoint), 1F1B's order checked as GPipe (an F after a B), GPipe's as 1F1B (too many held).
    const ScheduleSpec g = spec_of(&c, M, N, SCHED_BP_GPIPE, 0, 0);
    const ScheduleSpec f1 = spec_of(&c, M, N, SCHED_BP_1F1B, 0, 0);
    build_ok(&g, &S);
    for (int i = 0; i < S.stage_count[0]; i++) {
        o = op_at(&S, 0, 0, i);
        if (o->kind != OP_F) o->start -= 1.0, o->end -= 1.0;
    }
    expect_check_fails(&S, &g, "dependency: B(s=0,b=7,lag=0) starts at");
    schedule_free(&S);
    build_ok(&g, &S);
    S.mode = SCHED_BP_1F1B;
    expect_check_fails(&S, &f1, "bp-1f1b stage 0 holds 5 stashes, more than 4");
    schedule_free(&S);
    build_ok(&f1, &S);
    S.mode = SCHED_BP_GPIPE;
    expect_check_fails(&S, &g, "GPipe stage 0 runs F(s=0,b=4,lag=0) after a B op");
    schedule_free(&S);

    // A timetable checked against another spec.
    build_ok(&sp1, &S);
    expect_check_fails(&S, &sp, "spec has M=4 N=8 fg+bp lag 2");
    schedule_free(&S);
}

// ---------------------------------------------------------------------------------------------
// 5. Chrome trace

// Braces and brackets outside strings balance and never go negative; strings are closed.
static int json_balanced(const char *t) {
    int depth = 0, in_string = 0;
    for (; *t; t++) {
        if (in_string) {
            if (*t == '\\') t++;
            else if (*t == '"') in_string = 0;
            continue;
        }
        if (*t == '"') in_string = 1;
        else if (*t == '{' || *t == '[') depth++;
        else if ((*t == '}' || *t == ']') && --depth < 0) return 0;
    }
    return depth == 0 && !in_string;
}

static int count_of(const char *t, const char *needle) {
    int n = 0;
    for (const char *p = strstr(t, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static char *read_all(FILE *f) {
    const long size = ftell(f);
    rewind(f);
    char *text = calloc((size_t)size + 1, 1);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    return text;
}

static void test_chrome_trace(void **state) {
    (void)state;
    Costs c;
    make_costs(&c, COSTS_EQUAL, 4, 0);
    const ScheduleSpec sp = spec_of(&c, 4, 8, SCHED_FG_BP, 2, -1);
    Schedule S;
    build_ok(&sp, &S);
    FILE *f = tmpfile();
    assert_non_null(f);
    FgError err = {0};
    assert_int_equal(schedule_write_chrome_trace(&S, f, "fg+bp {\"lag 2\"}\\auto", &err), FG_OK);
    char *text = read_all(f);
    assert_non_null(strstr(text, "\"traceEvents\""));
    assert_non_null(strstr(text, "\"name\":\"Bi"));
    assert_non_null(strstr(text, "\"name\":\"Bw"));
    assert_non_null(strstr(text, "\"name\":\"F7\""));
    assert_non_null(strstr(text, "\"name\":\"U\""));
    assert_non_null(strstr(text, "\"phase\":1"));
    assert_non_null(strstr(text, "\"lag 2\\\"}\\\\auto\""));  // the label, escaped
    int lag2 = 0;  // a lag-2 op is named with two primes
    for (int i = 0; i < S.n_ops; i++) lag2 |= S.ops[i].lag == 2;
    if (lag2) assert_non_null(strstr(text, "''\""));
    assert_true(json_balanced(text));
    assert_int_equal(count_of(text, "\"ph\":\"X\""), S.n_ops);
    free(text);

    // Two timelines in one file: pid 0 and 1, each named.
    Schedule G;
    const ScheduleSpec g = spec_of(&c, 4, 8, SCHED_BP_1F1B, 0, 0);
    build_ok(&g, &G);
    const Schedule *both[2] = {&S, &G};
    const char *labels[2] = {"planned", "measured"};
    f = tmpfile();
    assert_non_null(f);
    assert_int_equal(schedule_write_chrome_traces(both, labels, 2, f, &err), FG_OK);
    text = read_all(f);
    assert_true(json_balanced(text));
    assert_int_equal(count_of(text, "\"ph\":\"X\""), S.n_ops + G.n_ops);
    assert_non_null(strstr(text, "\"name\":\"measured\""));
    assert_non_null(strstr(text, "\"pid\":1,\"tid\":3"));
    assert_non_null(strstr(text, "\"name\":\"B7\""));
    free(text);
    assert_int_equal(schedule_write_chrome_traces(both, labels, 0, stdout, &err), FG_ERR_INPUT);
    schedule_free(&S);
    schedule_free(&G);
}

// ---------------------------------------------------------------------------------------------
// 6. schedule_stashes

// True exactly for the (source phase, b) of the chains that reach the stage (found here from
// the Bw ops); always in bp, never in fg.
static int check_stashes(const ScheduleSpec *sp, const Schedule *S) {
    const int bp = sp->mode == SCHED_BP_GPIPE || sp->mode == SCHED_BP_1F1B;
    int n_true = 0;
    for (int p = 0; p < S->n_phases; p++)
        for (int s = 0; s < S->M; s++)
            for (int b = 0; b < S->N; b++) {
                int want = bp;
                for (int q = 0; q < S->n_phases; q++) {
                    const ScheduledOp *ops;
                    const int n = schedule_stage_ops(S, q, s, &ops);
                    for (int i = 0; i < n; i++)
                        want |= ops[i].kind == OP_BW && ops[i].microbatch == b &&
                                mod(q - ops[i].lag, S->n_phases) == p;
                }
                if (!schedule_stashes(S, p, s, b) != !want)
                    fail_msg(SPEC_FMT ": schedule_stashes(phase %d, stage %d, b %d) should be %d",
                             SPEC_ARGS(sp), p, s, b, want);
                n_true += want && !bp;
            }
    return n_true;
}

static void test_stashes(void **state) {
    (void)state;
    static const int ms[] = {1, 2, 4, 5, 8}, ns[] = {1, 3, 8, 16};
    int n_true = 0;
    for (int im = 0; im < 5; im++)
        for (int in = 0; in < 4; in++)
            for (int kind = 0; kind < N_COSTS; kind++)
                for (int mode = SCHED_BP_GPIPE; mode <= SCHED_FG_BP; mode++)
                    for (int lag = 0; lag <= (mode == SCHED_FG_BP ? SCHED_MAX_LAG : 0); lag++)
                        for (int k = 0; k < (mode == SCHED_FG_BP ? 3 : 1); k++) {
                            const int M = ms[im], N = ns[in];
                            const int select =
                                mode != SCHED_FG_BP ? 0 : k == 0 ? -1 : k == 1 ? 1 : N / 2;
                            Costs c;
                            make_costs(&c, kind, M, (uint64_t)(M * 31 + N));
                            const ScheduleSpec sp =
                                spec_of(&c, M, N, (ScheduleMode)mode, lag, select);
                            Schedule S;
                            build_ok(&sp, &S);
                            n_true += check_stashes(&sp, &S);
                            schedule_free(&S);
                        }
    assert_true(n_true > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_timetables),
        cmocka_unit_test(test_stashes_independent_of_n),
        cmocka_unit_test(test_link_order_uneven_stages),
        cmocka_unit_test(test_random_specs),
        cmocka_unit_test(test_bubble_used),
        cmocka_unit_test(test_auto_corrects_every_stage),
        cmocka_unit_test(test_late_forward_gathers_gaps),
        cmocka_unit_test(test_check_detects_violations),
        cmocka_unit_test(test_chrome_trace),
        cmocka_unit_test(test_stashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
