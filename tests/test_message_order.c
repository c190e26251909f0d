// NCCL matches messages by order, not by tag: cuda/transport_nccl.cu has one communicator per
// direction of each link (stage s to s+1: activations, s+1 to s: adjoints), so the k-th message
// received on it is the k-th sent. That is right only if, for every timetable the builder makes,
// stage s sends its forward messages in the order stage s+1 consumes them, and stage s+1 its
// adjoints in the order stage s consumes them. This test checks it on the timetables of every
// mode (bp gpipe, 1f1b and zb, fg, fg+bp with lag 0..2, auto and several select), M = 2..8,
// N = 1..32, uniform and random costs, run micro-batch-major and layer-major (exec_plan.h), over
// a run's first HORIZON steps (every phase of a timetable; adjoints of ops with lags cross
// steps). Evaluation's activations travel only forward, where no step leaves a message behind.
//
// The lists are the runtime's own: message_plan_build gives the order in which the engine
// posts its receives and the order in which its op groups send (src/schedule/exec_plan.c).
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

static long n_checked, n_cross_step;  // messages compared; those of an earlier step (a lag)

enum { HORIZON = 10 };  // steps from a run's start: every phase, and lags crossing steps

typedef struct {
    int kind, microbatch;
    long source;  // the step of the micro-batch's F
    long step;    // the step that sends or takes it
} Msg;

// The messages of stage `from` to `to` (sent: the send lists; else the receive lists) over
// steps 0..HORIZON-1 of a run, in order.
static int link_messages(const Schedule *S, ExecPlan plans[][SCHED_MAX_LAG + 1], int stage,
                         int peer, int sent, Msg *out) {
    int n = 0;
    for (long k = 0; k < HORIZON; k++) {
        int phase = (int)(k % S->n_phases);
        MessagePlan m;
        message_plan_build(S, &plans[stage][phase], phase, stage, k, &m);
        const PlannedMessage *list = sent ? m.send : m.recv;
        int count = sent ? m.n_send : m.n_recv;
        for (int i = 0; i < count; i++)
            if (list[i].peer == peer) out[n++] = (Msg){list[i].kind, list[i].microbatch, k - list[i].lag, k};
        message_plan_free(&m);
    }
    return n;
}

// "" when every FIFO of S delivers in the order its receiver consumes, over a run's first
// HORIZON steps, every stage run micro-batch-major or layer-major; else the first mismatch.
// What a stage receives is a prefix of what its neighbour sent; the rest (sent in the last
// steps, taken later) is at most what the last SCHED_MAX_LAG steps send.
static void check_fifos(const Schedule *S, int layer_major, char *why, size_t cap) {
    static ExecPlan plans[SCHED_MAX_STAGES][SCHED_MAX_LAG + 1];
    for (int s = 0; s < S->M; s++)
        for (int ph = 0; ph < S->n_phases; ph++) exec_plan_build(S, ph, s, layer_major, &plans[s][ph]);
    Msg *a = malloc((size_t)2 * HORIZON * S->n_ops * sizeof *a), *b = a + HORIZON * S->n_ops;
    why[0] = 0;
    for (int s = 0; s + 1 < S->M && !why[0]; s++)
        for (int dir = 0; dir < 2 && !why[0]; dir++) {
            // dir 0: s -> s+1 (activations); dir 1: s+1 -> s (adjoints)
            int from = dir ? s + 1 : s, to = dir ? s : s + 1;
            int na = link_messages(S, plans, from, to, 1, a);
            int nb = link_messages(S, plans, to, from, 0, b);
            for (int k = 0; k < nb && !why[0]; k++) {
                if (k < na && a[k].kind == b[k].kind && a[k].microbatch == b[k].microbatch &&
                    a[k].source == b[k].source) {
                    n_checked++;
                    continue;
                }
                snprintf(why, cap, "%s, %s stage %d -> %d: message %d sent (%ld, %d), consumed (%ld, %d) "
                         "as (step of F, micro-batch)", layer_major ? "layer-major" : "micro-batch-major",
                         dir ? "adjoints" : "activations", from, to, k, k < na ? a[k].source : -9,
                         k < na ? a[k].microbatch : -1, b[k].source, b[k].microbatch);
            }
            int pending = 0;
            for (int k = nb; k < na; k++) pending += a[k].source < HORIZON - 1 - SCHED_MAX_LAG;
            if (!why[0] && pending)
                snprintf(why, cap, "%s stage %d -> %d: %d messages of early steps never consumed",
                         dir ? "adjoints" : "activations", from, to, pending);
            for (int k = 0; k < nb; k++) n_cross_step += b[k].step > b[k].source;
        }
    free(a);
    for (int s = 0; s < S->M; s++)
        for (int ph = 0; ph < S->n_phases; ph++) exec_plan_free(&plans[s][ph]);
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
        {SCHED_BP_GPIPE, 0}, {SCHED_BP_1F1B, 0}, {SCHED_BP_ZB, 0}, {SCHED_FG, 0}, {SCHED_FG_BP, 0}, {SCHED_FG_BP, 1},
        {SCHED_FG_BP, 2}};
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
                        double half[SCHED_MAX_STAGES];
                        costs_for(kind, M, f, b, u);
                        for (int s = 0; s < M; s++) half[s] = b[s] / 2;
                        ScheduleSpec spec = {M, N, modes[im].mode, modes[im].lag,
                                             modes[im].mode == SCHED_FG_BP ? sels[is] : -1, f, half, half, u, 0};
                        Schedule S;
                        FgError err = {0};
                        if (schedule_build(&spec, &S, &err)) fail_msg("schedule_build: %s", err.msg);
                        char why[256];
                        for (int major = 0; major < 2; major++) {
                            check_fifos(&S, major, why, sizeof why);
                            if (why[0])
                                fail_msg("%s, lag %d, select %d, M %d, N %d, costs %d: %s",
                                         schedule_mode_name(spec.mode), spec.lag, spec.select, M, N,
                                         kind, why);
                        }
                        schedule_free(&S);
                        checked++;
                    }
                }
    print_message("%d timetables, %ld messages (%ld of them the previous step's): every FIFO in order\n",
                  checked, n_checked, n_cross_step);
    assert_true(n_cross_step > 0);  // B ops with lags were among them
}

// The check sees a reordering: two B ops of one stage swapped (as a builder that let stages
// take adjoints in different orders would make) are reported.
static void test_detects_reordering(void **state) {
    (void)state;
    double f[2] = {1, 1}, b[2] = {1, 1}, u[2] = {0, 0};
    ScheduleSpec spec = {2, 4, SCHED_BP_GPIPE, 0, -1, f, b, b, u, 0};
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
