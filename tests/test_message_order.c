// NCCL matches messages by order, not by tag: cuda/transport_nccl.cu has one communicator per
// direction of each link (stage s to s+1: activations, s+1 to s: adjoints), so the k-th message
// received on it is the k-th sent. That is right only if, for every timetable the builder makes,
// stage s sends its forward messages in the order stage s+1 consumes them, and stage s+1 its
// adjoints in the order stage s consumes them. This test checks it on the timetables of every
// mode (bp gpipe and 1f1b, fg, fg+bp with lag 0 and 1 and several n_sel), M = 2..8, N = 1..32,
// uniform and random costs, run micro-batch-major and layer-major (exec_plan.h), over a run's
// first step and the next (lag-1 B ops cross steps), and step by step: every message sent in a
// step is consumed in that step, so nothing sent in a step is still in a FIFO when the next
// one, or an evaluation (pipeline_evaluate), begins.
//
// The lists are the runtime's own: message_plan_build gives the order in which the engine
// posts its receives and the order in which its op groups send (src/exec_plan.c).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "exec_plan.h"
#include "schedule.h"

static long n_checked, n_cross_step;  // messages compared; those of the previous step (lag 1)

// The messages of `list` exchanged with `peer`, in order, into out.
static int with_peer(const PlannedMessage *list, int n, int peer, PlannedMessage *out) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (list[i].peer == peer) out[k++] = list[i];
    return k;
}

// "" when every FIFO of S matches in a run's first step and the next one, with every stage
// run micro-batch-major or layer-major; else the first mismatch.
static void check_fifos(const Schedule *S, int layer_major, char *why, size_t cap) {
    ExecPlan plan[SCHED_MAX_STAGES];
    MessagePlan msgs[SCHED_MAX_STAGES][2];
    for (int s = 0; s < S->M; s++) {
        exec_plan_build(S, s, layer_major, &plan[s]);
        for (int f = 0; f < 2; f++) message_plan_build(S, &plan[s], s, f, &msgs[s][f]);
    }
    PlannedMessage *a = malloc((size_t)2 * S->n_ops * sizeof *a), *b = a + S->n_ops;
    why[0] = 0;
    for (int first = 1; first >= 0 && !why[0]; first--)
        for (int s = 0; s + 1 < S->M && !why[0]; s++)
            for (int dir = 0; dir < 2 && !why[0]; dir++) {
                // dir 0: s -> s+1 (activations); dir 1: s+1 -> s (adjoints)
                int from = dir ? s + 1 : s, to = dir ? s : s + 1;
                const MessagePlan *src = &msgs[from][first], *dst = &msgs[to][first];
                int na = with_peer(src->send, src->n_send, to, a);
                int nb = with_peer(dst->recv, dst->n_recv, from, b);
                for (int k = 0; k < (na > nb ? na : nb); k++) {
                    if (k < na && k < nb && a[k].kind == b[k].kind && a[k].microbatch == b[k].microbatch &&
                        a[k].step_offset == b[k].step_offset) {
                        n_checked++, n_cross_step += a[k].step_offset < 0;
                        continue;
                    }
                    // (none) where one side has no k-th message.
                    snprintf(why, cap, "%s step, %s, %s stage %d -> %d: message %d sent (%d, %d), "
                             "consumed (%d, %d) as (step offset, micro-batch)",
                             first ? "first" : "second", layer_major ? "layer-major" : "micro-batch-major",
                             dir ? "adjoints" : "activations", from, to, k,
                             k < na ? a[k].step_offset : -9, k < na ? a[k].microbatch : -1,
                             k < nb ? b[k].step_offset : -9, k < nb ? b[k].microbatch : -1);
                    break;
                }
            }
    free(a);
    for (int s = 0; s < S->M; s++) {
        for (int f = 0; f < 2; f++) message_plan_free(&msgs[s][f]);
        exec_plan_free(&plan[s]);
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
                        for (int major = 0; major < 2; major++) {
                            check_fifos(&S, major, why, sizeof why);
                            if (why[0])
                                fail_msg("%s, lag %d, n_sel %d, M %d, N %d, costs %d: %s",
                                         schedule_mode_name(spec.mode), spec.lag, spec.n_sel, M, N,
                                         kind, why);
                        }
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
    check_fifos(&S, 1, why, sizeof why);
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
