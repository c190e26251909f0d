// Pipeline schedule builder: the invariants of every timetable (dependencies, no overlap, each
// selected micro-batch backpropagated exactly once per stage, F ops at their FG times), the
// closed-form makespans of uniform costs, the auto n_sel rule, that schedule_check catches
// corrupted timetables, and the Chrome trace export.
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
    double f[SCHED_MAX_STAGES], b[SCHED_MAX_STAGES], u[SCHED_MAX_STAGES];
} Costs;

// Cost sets: uniform with cost_b = 2, 1 and 0.5 cost_f, random per stage with cost_b = 2 cost_f
// (the usual ratio), random per stage with independent cost_b.
enum { COSTS_B2, COSTS_B1, COSTS_BHALF, COSTS_RANDOM_B2, COSTS_RANDOM, N_COSTS };
static const char *const cost_names[N_COSTS] = {"uniform b=2f", "uniform b=f", "uniform b=f/2",
                                               "random b=2f", "random"};

static void make_costs(Costs *c, int kind, int M, uint64_t seed) {
    Rng r = {seed * 7919 + (uint64_t)kind};
    static const double ratio[3] = {2.0, 1.0, 0.5};
    for (int s = 0; s < M; s++) {
        if (kind <= COSTS_BHALF) {
            c->f[s] = 1.0, c->b[s] = ratio[kind], c->u[s] = 0.25;
        } else {
            c->f[s] = rng_range(&r, 0.5, 1.5);
            c->b[s] = kind == COSTS_RANDOM_B2 ? 2.0 * c->f[s] : rng_range(&r, 0.2, 3.0);
            c->u[s] = rng_range(&r, 0.0, 0.5);
        }
    }
}

static ScheduleSpec spec_of(const Costs *c, int M, int N, ScheduleMode mode, int lag, int n_sel) {
    return (ScheduleSpec){M, N, mode, lag, n_sel, c->f, c->b, c->u};
}

static void build_ok(const ScheduleSpec *sp, Schedule *S) {
    FgError err = {0};
    if (schedule_build(sp, S, &err) != FG_OK) fail_msg("build: %s", err.msg);
    if (schedule_check(S, sp, &err) != FG_OK)
        fail_msg("check (M=%d N=%d %s lag %d n_sel %d): %s", sp->M, sp->N,
                 schedule_mode_name(sp->mode), sp->lag, sp->n_sel, err.msg);
}

// cmocka before 1.1.6 has no assert_double_equal.
#define assert_near(a, b, tol) assert_near_at((a), (b), (tol), #a, __LINE__)
static void assert_near_at(double a, double b, double tol, const char *what, int line) {
    if (!(fabs(a - b) <= tol))
        fail_msg("line %d: %s = %.17g, expected %.17g (+- %g)", line, what, a, b, tol);
}

static int slower(double a, double b) { return a > b * (1.0 + 1e-9); }

static const ScheduledOp *find_op(const Schedule *S, OpKind kind, int s, int b) {
    for (int i = 0; i < S->stage_count[s]; i++) {
        const ScheduledOp *o = &S->ops[S->stage_first[s] + i];
        if (o->kind == kind && o->microbatch == b) return o;
    }
    return NULL;
}

// The invariants again, written independently of schedule_check.
static void verify_independently(const ScheduleSpec *sp, const Schedule *S) {
    const int M = sp->M, N = sp->N;
    const int bp = sp->mode == SCHED_BP_GPIPE || sp->mode == SCHED_BP_1F1B;
    const int n_back = bp ? N : S->n_sel;
    if (sp->mode == SCHED_FG) assert_int_equal(S->n_sel, 0);
    int n_ops = 0;
    for (int s = 0; s < M; s++) {
        const ScheduledOp *ops = S->ops + S->stage_first[s];
        int count_b[SCHED_MAX_MICROBATCHES] = {0};
        n_ops += S->stage_count[s];
        for (int i = 0; i < S->stage_count[s]; i++) {
            assert_int_equal(ops[i].stage, s);
            if (i > 0 && ops[i].start < ops[i - 1].end)
                fail_msg("M=%d N=%d %s: stage %d overlaps at op %d", M, N,
                         schedule_mode_name(sp->mode), s, i);
            if (ops[i].kind == OP_B) {
                count_b[ops[i].microbatch]++;
                assert_int_equal(ops[i].iteration_offset, sp->mode == SCHED_FG_BP ? -sp->lag : 0);
                // the chain from the stage above, and (same iteration) the loss and the stash
                const int mb = ops[i].microbatch;
                const ScheduledOp *up = s < M - 1 ? find_op(S, OP_B, s + 1, mb) : NULL;
                assert_true(s == M - 1 || (up && ops[i].start >= up->end));
                if (ops[i].iteration_offset == 0) {
                    assert_true(ops[i].start >= find_op(S, OP_F, M - 1, mb)->end);
                    assert_true(ops[i].start >= find_op(S, OP_F, s, mb)->end);
                }
            }
        }
        for (int b = 0; b < N; b++) assert_int_equal(count_b[b], b < n_back ? 1 : 0);
        assert_int_equal(ops[S->stage_count[s] - 1].kind, OP_U);
    }
    assert_int_equal(n_ops, S->n_ops);
}

// ---------------------------------------------------------------------------------------------
// Tests

static void expect_spec_error(ScheduleSpec sp, const char *needle) {
    Schedule S;
    FgError err = {0};
    assert_int_equal(schedule_build(&sp, &S, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(S.ops);
}

static void test_spec_errors(void **state) {
    (void)state;
    Costs c;
    make_costs(&c, COSTS_B2, 4, 1);
    expect_spec_error(spec_of(&c, 0, 8, SCHED_FG, 0, 0), "M (stages) = 0");
    expect_spec_error(spec_of(&c, 65, 8, SCHED_FG, 0, 0), "M (stages) = 65");
    expect_spec_error(spec_of(&c, 4, 1025, SCHED_FG, 0, 0), "N (micro-batches) = 1025");
    expect_spec_error(spec_of(&c, 4, 8, (ScheduleMode)7, 0, 0), "mode = 7");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 2, 0), "lag = 2");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_BP_1F1B, 1, 0), "only mode fg+bp has a lag");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 0, 9), "n_sel = 9");
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG_BP, 0, -2), "n_sel = -2");
    c.f[2] = 0.0;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG, 0, 0), "cost_f[2] = 0");
    c.f[2] = 1.0, c.b[3] = NAN;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_BP_GPIPE, 0, 0), "cost_b[3]");
    c.b[3] = 2.0, c.u[0] = -1.0;
    expect_spec_error(spec_of(&c, 4, 8, SCHED_FG, 0, 0), "cost_u[0] = -1");
    c.u[0] = 0.0;
    ScheduleSpec sp = spec_of(&c, 4, 8, SCHED_FG, 0, 0);
    sp.cost_b = NULL;  // fg needs no B costs
    Schedule S;
    build_ok(&sp, &S);
    schedule_free(&S);
    sp.mode = SCHED_FG_BP;
    expect_spec_error(sp, "cost_b is NULL");
}

static const int Ms[] = {1, 2, 3, 4, 8}, Ns[] = {1, 2, 4, 8, 16, 32, 64};
enum { N_MS = sizeof Ms / sizeof Ms[0], N_NS = sizeof Ns / sizeof Ns[0] };

// One configuration against both checkers; fg+bp keeps every F op exactly where FG has it.
static void check_config(const ScheduleSpec *sp, const Schedule *fg) {
    Schedule S;
    build_ok(sp, &S);
    verify_independently(sp, &S);
    assert_near(S.fg_makespan, fg->makespan, 0.0);
    if (sp->mode == SCHED_FG_BP) {
        if (sp->n_sel >= 0) assert_int_equal(S.n_sel, sp->n_sel);
        if (sp->n_sel < 0) assert_int_equal(S.n_fit, S.n_sel);
        for (int s = 0; s < sp->M; s++)
            for (int b = 0; b < sp->N; b++) {
                const ScheduledOp *x = find_op(&S, OP_F, s, b), *y = find_op(fg, OP_F, s, b);
                assert_true(x->start == y->start && x->end == y->end);
            }
        // B ops lengthen the iteration only when some did not fit
        assert_int_equal(slower(S.makespan, fg->makespan), S.n_fit < S.n_sel);
    }
    schedule_free(&S);
}

// Every mode, lag and n_sel in {0, 1, N/2, auto} on every cost set.
static void test_all_configs(void **state) {
    (void)state;
    int n_built = 0;
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++)
            for (int kind = 0; kind < N_COSTS; kind++) {
                const int M = Ms[im], N = Ns[in];
                Costs c;
                make_costs(&c, kind, M, (uint64_t)(M * 100 + N));
                ScheduleSpec fg_spec = spec_of(&c, M, N, SCHED_FG, 0, 0);
                Schedule fg;
                build_ok(&fg_spec, &fg);
                verify_independently(&fg_spec, &fg);
                for (int mode = SCHED_BP_GPIPE; mode <= SCHED_FG_BP; mode++)
                    for (int lag = 0; lag <= (mode == SCHED_FG_BP); lag++)
                        for (int k = 0; k < (mode == SCHED_FG_BP ? 4 : 1); k++) {
                            const int n_sel = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? N / 2 : -1;
                            const ScheduleSpec sp = spec_of(&c, M, N, (ScheduleMode)mode, lag, n_sel);
                            check_config(&sp, &fg);
                            n_built++;
                        }
                schedule_free(&fg);
            }
    printf("# %d schedules built and checked\n", n_built);
}

// FG with uniform costs: makespan (N+M-1) f + u, idle share (M-1) f / ((N+M-1) f + u), which is
// (M-1)/(N+M-1) when the update is free.
static void test_fg_closed_form(void **state) {
    (void)state;
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++)
            for (int free_u = 0; free_u <= 1; free_u++) {
                const int M = Ms[im], N = Ns[in];
                Costs c;
                make_costs(&c, COSTS_B2, M, 0);
                for (int s = 0; s < M; s++) c.f[s] = 0.75, c.u[s] = free_u ? 0.0 : 0.3;
                ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG, 0, 0);
                Schedule S;
                build_ok(&sp, &S);
                const double span = (N + M - 1) * 0.75 + c.u[0];
                assert_near(S.makespan, span, 1e-12);
                const ScheduleStats st = schedule_stats(&S);
                assert_near(st.bubble_fraction, (M - 1) * 0.75 / span, 1e-12);
                if (free_u) assert_near(st.bubble_fraction, (double)(M - 1) / (N + M - 1), 1e-12);
                assert_near(st.bubble_used_by_b, 0.0, 0.0);
                schedule_free(&S);
            }
}

// Micro-batches whose F has run on stage s and whose B has not, at most along the stage's order.
static int max_in_flight(const Schedule *S, int s) {
    int n = 0, most = 0;
    for (int i = 0; i < S->stage_count[s]; i++) {
        const ScheduledOp *o = &S->ops[S->stage_first[s] + i];
        n += o->kind == OP_F ? 1 : o->kind == OP_B ? -1 : 0;
        most = n > most ? n : most;
    }
    return most;
}

// GPipe and 1F1B take (N+M-1)(f+b) + u with uniform costs; 1F1B holds at most M-s micro-batches
// on stage s where GPipe holds all N.
static void test_bp_schedules(void **state) {
    (void)state;
    static const double ratios[] = {0.5, 1.0, 2.0, 3.0};
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++)
            for (int ir = 0; ir < 4; ir++) {
                const int M = Ms[im], N = Ns[in];
                Costs c;
                for (int s = 0; s < M; s++) c.f[s] = 1.0, c.b[s] = ratios[ir], c.u[s] = 0.125;
                ScheduleSpec g = spec_of(&c, M, N, SCHED_BP_GPIPE, 0, 0), o = g;
                o.mode = SCHED_BP_1F1B;
                Schedule G, O;
                build_ok(&g, &G);
                build_ok(&o, &O);
                const double span = (N + M - 1) * (1.0 + ratios[ir]) + 0.125;
                assert_near(G.makespan, span, 1e-9);
                assert_near(O.makespan, span, 1e-9);
                for (int s = 0; s < M; s++) {
                    assert_int_equal(max_in_flight(&G, s), N);
                    assert_true(max_in_flight(&O, s) <= M - s);
                    assert_int_equal(max_in_flight(&O, s), N < M - s ? N : M - s);
                }
                schedule_free(&G);
                schedule_free(&O);
            }
    // Random costs: still valid, and 1F1B never needs more memory than GPipe.
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++) {
            Costs c;
            make_costs(&c, COSTS_RANDOM, Ms[im], 77);
            ScheduleSpec o = spec_of(&c, Ms[im], Ns[in], SCHED_BP_1F1B, 0, 0);
            Schedule O;
            build_ok(&o, &O);
            for (int s = 0; s < Ms[im]; s++) assert_true(max_in_flight(&O, s) <= Ms[im] - s);
            schedule_free(&O);
        }
}

// auto n_sel never lengthens the iteration and is maximal: one more selected micro-batch would.
static void test_auto_n_sel(void **state) {
    (void)state;
    int n_positive = 0, n_cases = 0;
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++)
            for (int kind = 0; kind < N_COSTS; kind++)
                for (int lag = 0; lag <= 1; lag++)
                    for (int seed = 0; seed < (kind >= COSTS_RANDOM_B2 ? 4 : 1); seed++) {
                        const int M = Ms[im], N = Ns[in];
                        Costs c;
                        make_costs(&c, kind, M, (uint64_t)(1000 + seed * 31 + M * N));
                        ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, lag, -1);
                        Schedule A;
                        build_ok(&sp, &A);
                        assert_false(slower(A.makespan, A.fg_makespan));
                        assert_int_equal(A.n_fit, A.n_sel);
                        n_cases++;
                        n_positive += A.n_sel > 0;
                        if (A.n_sel > 0) assert_true(schedule_stats(&A).bubble_used_by_b > 0.0);
                        // the explicit n_sel gives the same timetable
                        ScheduleSpec same = sp;
                        same.n_sel = A.n_sel;
                        Schedule E;
                        build_ok(&same, &E);
                        assert_int_equal(E.n_ops, A.n_ops);
                        assert_memory_equal(E.ops, A.ops, sizeof(ScheduledOp) * (size_t)A.n_ops);
                        schedule_free(&E);
                        if (A.n_sel < N) {
                            ScheduleSpec more = sp;
                            more.n_sel = A.n_sel + 1;
                            Schedule L;
                            build_ok(&more, &L);
                            if (!slower(L.makespan, L.fg_makespan))
                                fail_msg("M=%d N=%d %s lag %d: auto n_sel %d, but %d fits too", M, N,
                                         cost_names[kind], lag, A.n_sel, A.n_sel + 1);
                            assert_int_equal(L.n_fit, A.n_sel);
                            schedule_free(&L);
                        }
                        schedule_free(&A);
                    }
    printf("# auto n_sel > 0 in %d of %d fg+bp cases\n", n_positive, n_cases);
}

// Where the FG timetable has room for backprop with uniform costs. Stage M-1 is busy from its
// first F to the last one, so with lag 0 no B(M-1,b) fits before the update: auto n_sel = 0.
// With lag 1 a chain B(M-1)..B(0) starts in the fill bubble at the top (stage s idle until
// s f) and must finish in the drain bubble at the bottom (stage s idle after (s+N) f): with a
// stages in the fill and k = M-a in the drain that needs a b <= k f and k b <= a f, so b <= f.
// Hence b = f/2 fits for every M >= 2, b = f only for even M, b = 2f (the usual ratio) never:
// then B ops fill the bubble only with an explicit n_sel, which lengthens the iteration.
static void test_bubble_geometry(void **state) {
    (void)state;
    for (int im = 0; im < N_MS; im++)
        for (int in = 0; in < N_NS; in++) {
            const int M = Ms[im], N = Ns[in];
            for (int kind = COSTS_B2; kind <= COSTS_BHALF; kind++)
                for (int lag = 0; lag <= 1; lag++) {
                    Costs c;
                    make_costs(&c, kind, M, 0);
                    ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, lag, -1);
                    Schedule S;
                    build_ok(&sp, &S);
                    const int fits = lag == 1 && M >= 2 &&
                                     (kind == COSTS_BHALF || (kind == COSTS_B1 && M % 2 == 0));
                    if (fits != (S.n_sel > 0))
                        fail_msg("M=%d N=%d %s lag %d: auto n_sel = %d", M, N, cost_names[kind],
                                 lag, S.n_sel);
                    const double used = schedule_stats(&S).bubble_used_by_b;
                    if (fits) assert_true(used > 0.0);
                    schedule_free(&S);
                }
            // lag 1, b = 2f, one selected micro-batch: a positive share, at a price. M = 2 has
            // no gap longer than f, so a B op of 2f cannot start in the bubble at all.
            if (M < 3 || N < M) continue;
            Costs c;
            make_costs(&c, COSTS_B2, M, 0);
            ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, 1, 1);
            Schedule S;
            build_ok(&sp, &S);
            assert_int_equal(S.n_fit, 0);
            assert_true(schedule_stats(&S).bubble_used_by_b > 0.0);
            assert_true(slower(S.makespan, S.fg_makespan));
            schedule_free(&S);
        }
}

static void print_row(const char *name, const ScheduleSpec *sp) {
    Schedule S;
    build_ok(sp, &S);
    const ScheduleStats st = schedule_stats(&S);
    printf("# %-26s %3d %3d %9.3f %8.4f %8.4f %5d %5d\n", name, sp->M, sp->N, st.makespan,
           st.bubble_fraction, st.bubble_used_by_b, S.n_sel, S.n_fit);
    schedule_free(&S);
}

// The table for the report: M = 4, N = 8 and 32, f = 1, b = 2, free update.
static void test_stats_table(void **state) {
    (void)state;
    printf("# %-26s %3s %3s %9s %8s %8s %5s %5s\n", "schedule", "M", "N", "makespan", "bubble",
           "B-used", "n_sel", "n_fit");
    for (int in = 0; in < 2; in++) {
        const int M = 4, N = in ? 32 : 8;
        Costs c, half;
        for (int s = 0; s < M; s++) c.f[s] = 1.0, c.b[s] = 2.0, c.u[s] = 0.0;
        half = c;
        for (int s = 0; s < M; s++) half.b[s] = 0.5;
        ScheduleSpec g = spec_of(&c, M, N, SCHED_BP_GPIPE, 0, 0);
        ScheduleSpec o = spec_of(&c, M, N, SCHED_BP_1F1B, 0, 0);
        ScheduleSpec f = spec_of(&c, M, N, SCHED_FG, 0, 0);
        ScheduleSpec l0 = spec_of(&c, M, N, SCHED_FG_BP, 0, -1);
        ScheduleSpec l0_one = spec_of(&c, M, N, SCHED_FG_BP, 0, 1);
        ScheduleSpec l1 = spec_of(&c, M, N, SCHED_FG_BP, 1, -1);
        ScheduleSpec l1_one = spec_of(&c, M, N, SCHED_FG_BP, 1, 1);
        ScheduleSpec l1_half = spec_of(&half, M, N, SCHED_FG_BP, 1, -1);
        print_row("bp-gpipe", &g);
        print_row("bp-1f1b", &o);
        print_row("fg", &f);
        print_row("fg+bp lag0 auto", &l0);
        print_row("fg+bp lag0 n_sel=1", &l0_one);
        print_row("fg+bp lag1 auto", &l1);
        print_row("fg+bp lag1 n_sel=1", &l1_one);
        print_row("fg+bp lag1 auto (b=f/2)", &l1_half);
    }
}

// schedule_check catches corrupted timetables and names the broken invariant.
static void expect_check_fails(const Schedule *S, const ScheduleSpec *sp, const char *needle) {
    FgError err = {0};
    assert_int_not_equal(schedule_check(S, sp, &err), FG_OK);
    if (!strstr(err.msg, needle)) fail_msg("check message '%s' lacks '%s'", err.msg, needle);
}

static ScheduledOp *stage_op(Schedule *S, int s, int i) { return &S->ops[S->stage_first[s] + i]; }

static void test_check_detects_violations(void **state) {
    (void)state;
    const int M = 4, N = 8;
    Costs c;
    make_costs(&c, COSTS_BHALF, M, 0);
    ScheduleSpec sp = spec_of(&c, M, N, SCHED_FG_BP, 1, 2);
    Schedule S;
    build_ok(&sp, &S);

    // overlap: the second op of the last stage starts inside the first
    ScheduledOp saved = *stage_op(&S, M - 1, 1);
    ScheduledOp *o = stage_op(&S, M - 1, 1);
    const double len = o->end - o->start;
    o->start = stage_op(&S, M - 1, 0)->end - 0.25 * len, o->end = o->start + len;
    expect_check_fails(&S, &sp, "overlap");
    *o = saved;

    // a wrong duration
    stage_op(&S, 0, 0)->end += 0.5;
    expect_check_fails(&S, &sp, "its cost is");
    stage_op(&S, 0, 0)->end -= 0.5;

    // a B op relabelled: micro-batch 1 backpropagated twice, or one that was not selected
    ScheduledOp *b0 = NULL;
    for (int i = 0; i < S.stage_count[0] && !b0; i++)
        if (stage_op(&S, 0, i)->kind == OP_B) b0 = stage_op(&S, 0, i);
    assert_non_null(b0);
    saved = *b0;
    b0->microbatch = b0->microbatch == 0 ? 1 : 0;
    expect_check_fails(&S, &sp, "twice");
    b0->microbatch = 5;
    expect_check_fails(&S, &sp, "not a selected B op");
    *b0 = saved;
    b0->iteration_offset = 0;  // a lag-1 schedule holds only previous-iteration B ops
    expect_check_fails(&S, &sp, "not a selected B op");
    *b0 = saved;

    // a selected micro-batch missing on a stage: drop a B op from the last stage's list
    {
        const int last = S.stage_first[M - 1], n = S.stage_count[M - 1];
        int i = 0;
        while (S.ops[last + i].kind != OP_B) i++;
        saved = S.ops[last + i];
        memmove(&S.ops[last + i], &S.ops[last + i + 1], sizeof(ScheduledOp) * (size_t)(n - i - 1));
        S.stage_count[M - 1]--, S.n_ops--;
        expect_check_fails(&S, &sp, "is not backpropagated on stage 3");
        memmove(&S.ops[last + i + 1], &S.ops[last + i], sizeof(ScheduledOp) * (size_t)(n - i - 1));
        S.ops[last + i] = saved;
        S.stage_count[M - 1]++, S.n_ops++;
    }
    FgError err = {0};
    assert_int_equal(schedule_check(&S, &sp, &err), FG_OK);  // all repaired
    schedule_free(&S);

    // a broken dependency: GPipe stage 0 starts its B ops before stage 1 has sent the adjoint
    make_costs(&c, COSTS_B2, M, 0);
    ScheduleSpec g = spec_of(&c, M, N, SCHED_BP_GPIPE, 0, 0);
    build_ok(&g, &S);
    for (int i = 0; i < S.stage_count[0]; i++) {
        o = stage_op(&S, 0, i);
        if (o->kind != OP_F) o->start -= 1.0, o->end -= 1.0;
    }
    expect_check_fails(&S, &g, "dependency: B(s=0,b=7)");
    schedule_free(&S);

    // an update before the last d_b is known: FG, shift the first stage's U earlier
    ScheduleSpec f = spec_of(&c, M, N, SCHED_FG, 0, 0);
    build_ok(&f, &S);
    o = stage_op(&S, 0, S.stage_count[0] - 1);
    o->start -= 1.0, o->end -= 1.0;
    expect_check_fails(&S, &f, "dependency: U(s=0)");
    schedule_free(&S);

    // an F op moved relative to FG (without breaking a dependency): a fast last stage has gaps
    Costs slow_first = c;
    slow_first.f[0] = 2.0;
    ScheduleSpec f2 = spec_of(&slow_first, M, N, SCHED_FG, 0, 0);
    build_ok(&f2, &S);
    o = stage_op(&S, M - 1, 0);
    o->start += 0.5, o->end += 0.5;
    expect_check_fails(&S, &f2, "moved relative to FG");
    schedule_free(&S);

    // 1F1B that keeps too many micro-batches: GPipe's order checked as 1F1B
    ScheduleSpec o1 = spec_of(&c, M, N, SCHED_BP_1F1B, 0, 0);
    build_ok(&g, &S);
    S.mode = SCHED_BP_1F1B;
    expect_check_fails(&S, &o1, "1F1B stage 0 holds 5 micro-batches");
    schedule_free(&S);
}

// ---------------------------------------------------------------------------------------------
// Chrome trace: a minimal JSON parser that counts the events and checks their keys.

typedef struct {
    const char *p;
} Json;

static void j_ws(Json *j) {
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r') j->p++;
}

static int j_string(Json *j, char *out, size_t n) {  // copies up to n-1 chars, escapes kept raw
    size_t k = 0;
    if (*j->p != '"') return -1;
    for (j->p++; *j->p != '"'; j->p++) {
        if (!*j->p || (unsigned char)*j->p < 0x20) return -1;
        if (*j->p == '\\') {
            j->p++;
            if (!strchr("\"\\/bfnrtu", *j->p)) return -1;
        }
        if (out && k + 1 < n) out[k++] = *j->p;
    }
    j->p++;
    if (out) out[k] = 0;
    return 0;
}

static int j_value(Json *j, const char *const *keys, unsigned *seen);

static int j_object(Json *j, const char *const *keys, unsigned *seen) {
    j->p++;  // '{'
    j_ws(j);
    if (*j->p == '}') return j->p++, 0;
    for (;;) {
        char key[64];
        j_ws(j);
        if (j_string(j, key, sizeof key)) return -1;
        for (int i = 0; keys && keys[i]; i++)
            if (!strcmp(key, keys[i])) *seen |= 1u << i;
        j_ws(j);
        if (*j->p++ != ':') return -1;
        if (j_value(j, NULL, NULL)) return -1;
        j_ws(j);
        if (*j->p == '}') return j->p++, 0;
        if (*j->p++ != ',') return -1;
    }
}

static int j_value(Json *j, const char *const *keys, unsigned *seen) {
    j_ws(j);
    if (*j->p == '{') return j_object(j, keys, seen);
    if (*j->p == '"') return j_string(j, NULL, 0);
    if (*j->p == '[') {
        j->p++;
        j_ws(j);
        if (*j->p == ']') return j->p++, 0;
        for (;;) {
            if (j_value(j, NULL, NULL)) return -1;
            j_ws(j);
            if (*j->p == ']') return j->p++, 0;
            if (*j->p++ != ',') return -1;
        }
    }
    char *end;
    strtod(j->p, &end);
    if (end == j->p) return -1;
    j->p = end;
    return 0;
}

// Parses {"traceEvents":[{...},...], ...}; returns the number of op events (those with all of
// name, ph, pid, tid, ts, dur), or -1. Metadata events (names of processes and tracks) need
// only name, ph and pid.
static int parse_trace(const char *text) {
    static const char *const keys[] = {"name", "ph", "pid", "tid", "ts", "dur", NULL};
    Json j = {text};
    int n = -1;
    j_ws(&j);
    if (*j.p++ != '{') return -1;
    for (;;) {
        char key[64];
        j_ws(&j);
        if (j_string(&j, key, sizeof key)) return -1;
        j_ws(&j);
        if (*j.p++ != ':') return -1;
        j_ws(&j);
        if (!strcmp(key, "traceEvents")) {
            if (*j.p++ != '[') return -1;
            for (n = 0;;) {
                unsigned seen = 0;
                j_ws(&j);
                if (*j.p != '{' || j_object(&j, keys, &seen) || (seen & 0x7u) != 0x7u) return -1;
                n += seen == 0x3fu;
                j_ws(&j);
                if (*j.p == ']') break;
                if (*j.p++ != ',') return -1;
            }
            j.p++;
        } else if (j_value(&j, NULL, NULL)) {
            return -1;
        }
        j_ws(&j);
        if (*j.p == '}') break;
        if (*j.p++ != ',') return -1;
    }
    j.p++;
    j_ws(&j);
    return *j.p ? -1 : n;
}

static void test_chrome_trace(void **state) {
    (void)state;
    Costs c;
    make_costs(&c, COSTS_BHALF, 4, 0);
    ScheduleSpec sp = spec_of(&c, 4, 8, SCHED_FG_BP, 1, -1);
    Schedule S;
    build_ok(&sp, &S);
    assert_true(S.n_sel > 0);
    FILE *f = tmpfile();
    assert_non_null(f);
    FgError err = {0};
    assert_int_equal(schedule_write_chrome_trace(&S, f, "fg+bp \"lag 1\"\\auto", &err), FG_OK);
    const long size = ftell(f);
    rewind(f);
    char *text = calloc((size_t)size + 1, 1);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    assert_non_null(strstr(text, "\"traceEvents\""));
    assert_non_null(strstr(text, "\"name\":\"B0'\""));
    assert_non_null(strstr(text, "\"name\":\"F7\""));
    assert_non_null(strstr(text, "\"name\":\"U\""));
    assert_int_equal(parse_trace(text), S.n_ops);
    // the last op of stage 3 (U) at its planned time in microseconds
    const ScheduledOp *u = &S.ops[S.stage_first[3] + S.stage_count[3] - 1];
    char expect[96];
    snprintf(expect, sizeof expect, "\"tid\":3,\"ts\":%.3f", u->start * 1e6);
    assert_non_null(strstr(text, expect));
    free(text);
    schedule_free(&S);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_all_configs),
        cmocka_unit_test(test_fg_closed_form),
        cmocka_unit_test(test_bp_schedules),
        cmocka_unit_test(test_auto_n_sel),
        cmocka_unit_test(test_bubble_geometry),
        cmocka_unit_test(test_stats_table),
        cmocka_unit_test(test_check_detects_violations),
        cmocka_unit_test(test_chrome_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
