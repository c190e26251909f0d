// The zero-bubble bp timetable (schedule = zb, ZB-H1): its invariants for every M <= 8 and
// N <= 64 under several cost sets (checked by schedule_check and again here: every micro-batch
// once through F, Bi and Bw on every stage, each op after its inputs, one op at a time, the
// stash bound), Bw in micro-batch order (what makes its weights 1F1B's, byte for byte:
// tests/pipeline_equivalence.sh), and the bubble it leaves against 1F1B's; with recompute
// (bw_redoes_bi) every Bw, also fg+bp's, planned at Bi's cost and its own.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "schedule.h"
#include "test_util.h"

enum { COSTS_EQUAL, COSTS_HALF, COSTS_RANDOM, COSTS_RANDOM_U, N_COSTS };

typedef struct {
    double f[SCHED_MAX_STAGES], bi[SCHED_MAX_STAGES], bw[SCHED_MAX_STAGES], u[SCHED_MAX_STAGES];
} Costs;

// F = Bi = Bw = 1; Bi = Bw = F/2; random per stage around F (with a free or a costly update).
static void make_costs(Costs *c, int kind, int M, uint64_t seed) {
    Rng r = {seed * 104729 + (uint64_t)kind};
    for (int s = 0; s < M; s++) {
        c->f[s] = 1.0, c->u[s] = 0.0;
        c->bi[s] = c->bw[s] = kind == COSTS_HALF ? 0.5 : 1.0;
        if (kind >= COSTS_RANDOM) {
            c->f[s] = rng_range(&r, 0.5, 1.5);
            c->bi[s] = c->f[s] * rng_range(&r, 0.5, 1.5);
            c->bw[s] = c->f[s] * rng_range(&r, 0.3, 1.5);
            c->u[s] = kind == COSTS_RANDOM_U ? rng_range(&r, 0.05, 0.5) : 0.0;
        }
    }
}

// Explicit fg+bp (select >= 0) at lag, or auto (-1); redo: bw_redoes_bi.
static void build_spec(const Costs *c, int M, int N, ScheduleMode mode, int lag, int select, int redo,
                       Schedule *S) {
    const ScheduleSpec sp = {M, N, mode, lag, select, c->f, c->bi, c->bw, c->u, redo};
    FgError err = {0};
    if (schedule_build(&sp, S, &err)) fail_msg("build %s M=%d N=%d: %s", schedule_mode_name(mode), M, N, err.msg);
    if (schedule_check(S, &sp, &err)) fail_msg("check %s M=%d N=%d: %s", schedule_mode_name(mode), M, N, err.msg);
}

static void build(const Costs *c, int M, int N, ScheduleMode mode, Schedule *S) {
    build_spec(c, M, N, mode, 0, 0, 0, S);
}

static const ScheduledOp *find(const Schedule *S, int s, OpKind kind, int b) {
    const ScheduledOp *ops;
    const int n = schedule_stage_ops(S, 0, s, &ops);
    for (int i = 0; i < n; i++)
        if (ops[i].kind == kind && ops[i].microbatch == b) return &ops[i];
    fail_msg("M=%d N=%d: stage %d has no %s of micro-batch %d", S->M, S->N, s, op_kind_name(kind), b);
    return NULL;
}

// Written independently of schedule_check: returns stage s's most stashes held at once.
static int verify_stage(const Schedule *S, const Costs *c, int s, int redo) {
    const int M = S->M, N = S->N;
    const double eps = 1e-9 * S->makespan;
    const ScheduledOp *ops;
    const int n = schedule_stage_ops(S, 0, s, &ops);
    assert_int_equal(n, 3 * N + 1);
    assert_int_equal(ops[n - 1].kind, OP_U);
    int held = 0, most = 0, kept = 0, most_kept = 0, next_w = 0;
    for (int i = 0; i < n - 1; i++) {
        const ScheduledOp *o = &ops[i];
        assert_int_equal(o->lag, 0);
        assert_true(o->kind == OP_F || o->kind == OP_BI || o->kind == OP_BW);
        const double bw = c->bw[s] + (redo ? c->bi[s] : 0.0);
        const double cost = o->kind == OP_F ? c->f[s] : o->kind == OP_BI ? c->bi[s] : bw;
        assert_true(fabs(o->end - o->start - cost) <= eps);
        if (i > 0) assert_true(o->start >= ops[i - 1].end - eps);
        const int b = o->microbatch;
        if (o->kind == OP_F && s > 0) assert_true(o->start >= find(S, s - 1, OP_F, b)->end - eps);
        if (o->kind == OP_BI) {
            assert_true(o->start >= find(S, s, OP_F, b)->end - eps);
            const ScheduledOp *adjoint = s < M - 1 ? find(S, s + 1, OP_BI, b) : find(S, s, OP_F, b);
            assert_true(o->start >= adjoint->end - eps);
        }
        if (o->kind == OP_BW) {
            assert_true(o->start >= find(S, s, OP_BI, b)->end - eps);
            assert_int_equal(b, next_w++);  // the weight gradient sums in micro-batch order
        }
        held += o->kind == OP_F ? 1 : o->kind == OP_BW ? -1 : 0;
        kept += o->kind == OP_BI ? 1 : o->kind == OP_BW ? -1 : 0;
        most = FG_MAX(most, held), most_kept = FG_MAX(most_kept, kept);
    }
    assert_int_equal(next_w, N);
    assert_int_equal(held, 0);
    assert_true(ops[n - 1].start >= ops[n - 2].end - eps);
    if (most > M) fail_msg("M=%d N=%d stage %d holds %d stashes, ZB-H1 allows M", M, N, s, most);
    if (most_kept > s + 1) fail_msg("M=%d N=%d stage %d keeps %d adjoints, more than s+1", M, N, s, most_kept);
    const StageBubbles sb = schedule_stage_bubbles(S, s);
    assert_int_equal(sb.corrections, N);
    assert_int_equal(sb.stashes, most);
    assert_int_equal(sb.kept, most_kept);
    return most;
}

static void test_invariants(void **state) {
    (void)state;
    int built = 0;
    for (int M = 1; M <= 8; M++)
        for (int N = 1; N <= 64; N++)
            for (int kind = 0; kind < N_COSTS; kind++) {
                Costs c;
                make_costs(&c, kind, M, (uint64_t)(M * 131 + N));
                for (int redo = 0; redo < 2; redo++) {
                    Schedule S;
                    build_spec(&c, M, N, SCHED_BP_ZB, 0, 0, redo, &S);
                    for (int s = 0; s < M; s++) verify_stage(&S, &c, s, redo);
                    schedule_free(&S);
                    built++;
                }
            }
    printf("# %d zb timetables verified\n", built);
}

// Idle time of all stages before their U, as a share of M x (the last backward op's end).
static double bubble(const Schedule *S) {
    double busy = 0.0, end = 0.0;
    for (int i = 0; i < S->n_ops; i++)
        if (S->ops[i].kind != OP_U) busy += S->ops[i].end - S->ops[i].start, end = FG_MAX(end, S->ops[i].end);
    return 1.0 - busy / (S->M * end);
}

// With F = Bi = Bw, 1F1B idles (M-1)(F + Bi + Bw) per stage, ZB-H1 (M-1)(F + Bi - Bw): a
// third (Qi et al.); the greedy placement of the op orders must reach it. With other costs
// zb's step is never longer than 1F1B's.
static void test_bubble_against_1f1b(void **state) {
    (void)state;
    for (int M = 2; M <= 8; M++)
        for (int N = M; N <= 32; N += M) {
            Costs c;
            make_costs(&c, COSTS_EQUAL, M, 0);
            Schedule zb, ofob;
            build(&c, M, N, SCHED_BP_ZB, &zb);
            build(&c, M, N, SCHED_BP_1F1B, &ofob);
            const double idle_zb = bubble(&zb) * M * (zb.makespan), idle_1f1b = bubble(&ofob) * M * ofob.makespan;
            if (fabs(idle_1f1b - M * (M - 1) * 3.0) > 1e-9 || fabs(idle_zb - M * (M - 1) * 1.0) > 1e-9)
                fail_msg("M=%d N=%d: idle 1f1b %g (want %d), zb %g (want %d)", M, N, idle_1f1b,
                         M * (M - 1) * 3, idle_zb, M * (M - 1));
            schedule_free(&zb);
            schedule_free(&ofob);
            for (int kind = COSTS_HALF; kind < N_COSTS; kind++) {
                make_costs(&c, kind, M, (uint64_t)N);
                build(&c, M, N, SCHED_BP_ZB, &zb);
                build(&c, M, N, SCHED_BP_1F1B, &ofob);
                if (zb.makespan > ofob.makespan * (1 + 1e-12))
                    fail_msg("M=%d N=%d costs %d: zb's step %g, 1f1b's %g", M, N, kind, zb.makespan, ofob.makespan);
                schedule_free(&zb);
                schedule_free(&ofob);
            }
        }
}

// The stash bound is the first stage's of 1F1B on every stage, whatever N.
static void test_stash_bound(void **state) {
    (void)state;
    Costs c;
    make_costs(&c, COSTS_EQUAL, 8, 0);
    Schedule zb, ofob;
    build(&c, 8, 64, SCHED_BP_ZB, &zb);
    build(&c, 8, 64, SCHED_BP_1F1B, &ofob);
    for (int s = 0; s < 8; s++) {
        assert_int_equal(schedule_stage_bubbles(&zb, s).stashes, 8);
        assert_int_equal(schedule_stage_bubbles(&ofob, s).stashes, 8 - s);
        assert_int_equal(schedule_stage_bubbles(&ofob, s).kept, 0);
    }
    schedule_free(&zb);
    schedule_free(&ofob);
}

// fg+bp with recompute (auto, and explicit at lag 0 and 1): schedule_check holds every op to
// its planned cost, and here each Bw lasts Bi's cost and its own.
static void test_bw_redoes_bi(void **state) {
    (void)state;
    const int selects[][2] = {{-1, 1}, {2, 0}, {2, 1}};  // select, lag
    for (int M = 1; M <= 4; M++)
        for (int k = 0; k < 3; k++) {
            Costs c;
            make_costs(&c, COSTS_RANDOM, M, (uint64_t)(M * 7 + k));
            Schedule S;
            build_spec(&c, M, 8, SCHED_FG_BP, selects[k][1], selects[k][0], 1, &S);
            int n_bw = 0;
            for (int i = 0; i < S.n_ops; i++) {
                const ScheduledOp *o = &S.ops[i];
                if (o->kind != OP_BW) continue;
                const double planned = c.bi[o->stage] + c.bw[o->stage];
                assert_true(fabs(o->end - o->start - planned) <= 1e-9 * S.makespan);
                n_bw++;
            }
            if (!n_bw && selects[k][0] > 0) fail_msg("M=%d select %d: no Bw op", M, selects[k][0]);
            schedule_free(&S);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariants),
        cmocka_unit_test(test_bubble_against_1f1b),
        cmocka_unit_test(test_stash_bound),
        cmocka_unit_test(test_bw_redoes_bi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
