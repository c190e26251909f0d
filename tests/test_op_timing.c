// The start-up's op costs, timed through the engine's own step (src/engine/op_timing.c): a
// throwaway pipeline of each stage of a 2-stage MLP runs its mode's timetable alone. Every kind
// of op the timetable holds costs a finite positive time, a kind it never holds costs 0, and a
// stage timed twice is timed from scratch both times (the copy leaves nothing behind).
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "config.h"
#include "model.h"
#include "op_timing.h"

typedef struct {
    const char *name;
    const char *sets[4][2];
    int backprops;  // the timetable holds B (or Bi and Bw) ops
} Case;

static const Case cases[] = {
    {"bp zb", {{"mode", "bp"}, {"schedule", "zb"}}, 1},
    {"bp 1f1b", {{"mode", "bp"}, {"schedule", "1f1b"}}, 1},
    {"bp gpipe, recompute", {{"mode", "bp"}, {"schedule", "gpipe"}, {"recompute", "stage"}}, 1},
    {"fg", {{"mode", "fg"}, {"perturb", "weight"}}, 0},
    {"fg+bp auto", {{"mode", "fg+bp"}, {"perturb", "weight"}, {"shrink", "0.1"}}, 1},
    {"fg+bp select 1 lag 1", {{"mode", "fg+bp"}, {"perturb", "weight"}, {"select", "1"}, {"lag", "1"}}, 1},
};

static void check_costs(const Case *k, int stage, const double cost[N_OP_COSTS]) {
    printf("# %s, stage %d: f %.3g bi %.3g bw %.3g u %.3g s\n", k->name, stage, cost[COST_F],
           cost[COST_BI], cost[COST_BW], cost[COST_U]);
    for (int i = 0; i < N_OP_COSTS; i++) assert_true(isfinite(cost[i]) && cost[i] >= 0);
    assert_true(cost[COST_F] > 0 && cost[COST_U] > 0);
    if (k->backprops) assert_true(cost[COST_BI] > 0 && cost[COST_BI] + cost[COST_BW] > 0);
    else assert_true(cost[COST_BI] == 0 && cost[COST_BW] == 0);
    assert_true(cost[COST_ZERO] == 0);
}

static void test_every_mode_times_its_ops(void **state) {
    (void)state;
    Model m;
    FgError err = {0};
    assert_int_equal(model_build_mlp(&m, "48-64-64-10", "relu", &err), FG_OK);
    const int layout[] = {0, 2, m.n_layers};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        config_defaults(&c);
        assert_int_equal(config_set(&c, "stages", "2", &err), FG_OK);
        assert_int_equal(config_set(&c, "micro_batch", "8", &err), FG_OK);
        assert_int_equal(config_set(&c, "micro_batches", "3", &err), FG_OK);
        for (int j = 0; j < 4 && cases[i].sets[j][0]; j++)
            if (config_set(&c, cases[i].sets[j][0], cases[i].sets[j][1], &err))
                fail_msg("%s: %s", cases[i].name, err.msg);
        for (int s = 0; s < 2; s++)
            for (int again = 0; again < 2; again++) {
                double cost[N_OP_COSTS];
                if (pipeline_time_ops(&backend_cpu, &c, &m, layout, s, 2, 0, 1, cost, &err))
                    fail_msg("%s, stage %d: %s", cases[i].name, s, err.msg);
                check_costs(&cases[i], s, cost);
            }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_mode_times_its_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
