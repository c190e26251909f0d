// NCCL matches messages by order, not by tag: cuda/transport_nccl.cu has one communicator per
// direction of each link (stage s to s+1: activations, s+1 to s: adjoints), so the k-th message
// received on it is the k-th sent. That is right only if, for every timetable the builder makes,
// stage s sends its forward messages in the order stage s+1 consumes them, and stage s+1 its
// adjoints in the order stage s consumes them. This test checks it on the timetables of every
// mode (bp gpipe and 1f1b, fg, fg+bp with lag 0 and 1 and several n_sel), M = 2..8, N = 1..32,
// uniform and random costs, over a run's first step and the next (lag-1 B ops cross steps), and
// step by step: every message sent in a step is consumed in that step, so nothing sent in a step
// is still in a FIFO when the next one, or an evaluation (pipeline_evaluate), begins.
//
// What src/pipeline.c does, which the lists below follow:
//  - sends: op_forward sends one message to s+1 at each F op (not on the last stage), tagged
//    (forward, step, mb); op_backward sends one to s-1 at each B op that runs (not on stage 0),
//    tagged (backward, step + iteration_offset, mb). pipeline_step skips a B op for which
//    op_runs is false: step + iteration_offset < first_step (a lag-1 op in a run's first step).
//  - receives: op_receive says which ops consume a message: F ops (not on stage 0) and B ops
//    that run (not on the last stage); post_next_receive posts them one at a time in timetable
//    order and pipeline_step waits for each before its op, so they are consumed in op order.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "schedule.h"

typedef struct {
    long step;  // the step the message belongs to (its tag's step)
    int mb;
} Msg;

enum { MAX_MSGS = 2 * SCHED_MAX_MICROBATCHES };
static long n_checked, n_cross_step;  // messages compared; those of the previous step (lag 1)

// The messages stage s sends towards `to` (s+1: forward, s-1: backward) in step `step` of a run
// that started at first_step, in the order sent.
static int sent(const Schedule *S, int s, int to, long step, long first_step, Msg *out) {
    int n = 0;
    for (int i = S->stage_first[s]; i < S->stage_first[s] + S->stage_count[s]; i++) {
        const ScheduledOp *op = &S->ops[i];
        if (to == s + 1 && op->kind == OP_F) out[n++] = (Msg){step, op->microbatch};
        if (to == s - 1 && op->kind == OP_B && step + op->iteration_offset >= first_step)
            out[n++] = (Msg){step + op->iteration_offset, op->microbatch};
    }
    return n;
}

// The messages stage s consumes from `from`, in the order consumed.
static int consumed(const Schedule *S, int s, int from, long step, long first_step, Msg *out) {
    int n = 0;
    for (int i = S->stage_first[s]; i < S->stage_first[s] + S->stage_count[s]; i++) {
        const ScheduledOp *op = &S->ops[i];
        if (from == s - 1 && op->kind == OP_F) out[n++] = (Msg){step, op->microbatch};
        if (from == s + 1 && op->kind == OP_B && step + op->iteration_offset >= first_step)
            out[n++] = (Msg){step + op->iteration_offset, op->microbatch};
    }
    return n;
}

// "" when every FIFO of S matches in steps first_step and first_step + 1 of a run that
// started at first_step (a lag-1 B op runs only in the second); else the first mismatch.
static void check_fifos(const Schedule *S, long first_step, char *why, size_t cap) {
    static Msg a[MAX_MSGS], b[MAX_MSGS];
    why[0] = 0;
    for (long step = first_step; step <= first_step + 1; step++)
        for (int s = 0; s + 1 < S->M; s++)
            for (int dir = 0; dir < 2; dir++) {
                // dir 0: s -> s+1 (activations); dir 1: s+1 -> s (adjoints)
                int from = dir ? s + 1 : s, to = dir ? s : s + 1;
                int na = sent(S, from, to, step, first_step, a);
                int nb = consumed(S, to, from, step, first_step, b);
                for (int k = 0; k < (na > nb ? na : nb); k++) {
                    if (k < na && k < nb && a[k].step == b[k].step && a[k].mb == b[k].mb) {
                        n_checked++, n_cross_step += a[k].step < step;
                        continue;
                    }
                    // Steps relative to the run's first; (none) where one side has no k-th message.
                    snprintf(why, cap, "step %ld, %s stage %d -> %d: message %d sent (%ld, %d), "
                             "consumed (%ld, %d) as (step, micro-batch)",
                             step - first_step, dir ? "adjoints" : "activations", from, to, k,
                             k < na ? a[k].step - first_step : -1, k < na ? a[k].mb : -1,
                             k < nb ? b[k].step - first_step : -1, k < nb ? b[k].mb : -1);
                    return;
                }
            }
}

static void costs_for(int kind, int M, double *f, double *b, double *u) {
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(kind + 1);
    for (int s = 0; s < M; s++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double r = (double)(x >> 11) / 9007199254740992.0;  // [0, 1)
        f[s] = kind == 0 ? 1.0 : kind == 1 ? 1.0 : 0.3 + 1.4 * r;
        b[s] = kind == 0 ? 2.0 : kind == 1 ? 0.5 : 0.2 + 3.0 * (1.0 - r);
        u[s] = kind == 2 ? 0.5 * r : 0.1;
    }
}

static void test_every_timetable(void **state) {
    (void)state;
    static const int Ns[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32};
    struct { ScheduleMode mode; int lag; } modes[] = {
        {SCHED_BP_GPIPE, 0}, {SCHED_BP_1F1B, 0}, {SCHED_FG, 0}, {SCHED_FG_BP, 0}, {SCHED_FG_BP, 1}};
    int checked = 0;
    for (int M = 2; M <= 8; M++)
        for (size_t in = 0; in < sizeof Ns / sizeof Ns[0]; in++)
            for (size_t im = 0; im < sizeof modes / sizeof modes[0]; im++)
                for (int kind = 0; kind < 3; kind++) {
                    int N = Ns[in];
                    int sels[] = {-1, 1, N / 2, N};
                    int n_sels = modes[im].mode == SCHED_FG_BP ? 4 : 1;
                    for (int is = 0; is < n_sels; is++) {
                        double f[SCHED_MAX_STAGES], b[SCHED_MAX_STAGES], u[SCHED_MAX_STAGES];
                        costs_for(kind, M, f, b, u);
                        ScheduleSpec spec = {M, N, modes[im].mode, modes[im].lag, sels[is], f, b, u};
                        Schedule S;
                        FgError err = {0};
                        if (schedule_build(&spec, &S, &err)) fail_msg("schedule_build: %s", err.msg);
                        char why[256];
                        check_fifos(&S, 0, why, sizeof why);
                        if (why[0])
                            fail_msg("%s, lag %d, n_sel %d, M %d, N %d, costs %d: %s",
                                     schedule_mode_name(spec.mode), spec.lag, spec.n_sel, M, N, kind, why);
                        schedule_free(&S);
                        checked++;
                    }
                }
    print_message("%d timetables, %ld messages (%ld of them the previous step's): every FIFO in order\n",
                  checked, n_checked, n_cross_step);
    assert_true(n_cross_step > 0);  // lag-1 B ops were among them
}

// The check sees a reordering: two B ops of one stage swapped (as a builder that let stages
// take adjoints in different orders would make) are reported.
static void test_detects_reordering(void **state) {
    (void)state;
    double f[2] = {1, 1}, b[2] = {2, 2}, u[2] = {0, 0};
    ScheduleSpec spec = {2, 4, SCHED_BP_GPIPE, 0, 0, f, b, u};
    Schedule S;
    FgError err = {0};
    assert_int_equal(schedule_build(&spec, &S, &err), FG_OK);
    char why[256];
    check_fifos(&S, 0, why, sizeof why);
    assert_string_equal(why, "");
    int first_b = -1;
    for (int i = S.stage_first[0]; i < S.stage_first[0] + S.stage_count[0] && first_b < 0; i++)
        if (S.ops[i].kind == OP_B) first_b = i;
    assert_true(first_b >= 0 && S.ops[first_b + 1].kind == OP_B);
    int mb = S.ops[first_b].microbatch;
    S.ops[first_b].microbatch = S.ops[first_b + 1].microbatch;
    S.ops[first_b + 1].microbatch = mb;
    check_fifos(&S, 0, why, sizeof why);
    assert_non_null(strstr(why, "adjoints stage 1 -> 0: message 0"));
    schedule_free(&S);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_timetable),
        cmocka_unit_test(test_detects_reordering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
