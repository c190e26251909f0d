// fg+bp's choice of timetable where the update is c alone (timetable_choice.c): the candidate
// with the most exact micro-batches per second, weighed by lag; never one where a stage has no
// correction; and only for select = -1 with c alone.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "config.h"
#include "op_cost.h"
#include "pipeline.h"

enum { M = 4 };

// Costs [kind * M + stage] with the same F, Bi, Bw and U on every stage.
static void uniform_costs(double f, double bi, double bw, double u, double *costs) {
    const double per_kind[N_OP_COSTS] = {[COST_F] = f, [COST_BI] = bi, [COST_BW] = bw, [COST_U] = u};
    for (int k = 0; k < N_OP_COSTS; k++)
        for (int s = 0; s < M; s++) costs[k * M + s] = per_kind[k];
}

static Config c_alone(void) {
    Config c;
    config_defaults(&c);
    FgError err = {0};
    const char *sets[][2] = {{"mode", "fg+bp"}, {"perturb", "activity"}, {"estimator", "mix"},
                             {"shrink", "0"}, {"select", "-1"}, {"max_lag", "2"},
                             {"micro_batches", "4"}, {"stages", "4"}};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        assert_int_equal(config_set(&c, sets[i][0], sets[i][1], &err), FG_OK);
    return c;
}

// The chosen timetable is at least as good as each candidate, built here on its own.
static void test_chooses_the_best_candidate(void **state) {
    (void)state;
    double costs[N_OP_COSTS * M];
    const double lag_costs[] = {0.0, 0.25, 2.0};
    const double backward[][2] = {{0.5, 0.5}, {1.0, 1.0}, {0.05, 1.0}};  // Bi, Bw against F = 1
    for (size_t i = 0; i < sizeof lag_costs / sizeof lag_costs[0]; i++)
        for (size_t j = 0; j < sizeof backward / sizeof backward[0]; j++) {
            Config c = c_alone();
            c.timetable.lag_cost = lag_costs[i];
            uniform_costs(1.0, backward[j][0], backward[j][1], 0.2, costs);
            Schedule chosen;
            char why[256];
            FgError err = {0};
            assert_int_equal(pipeline_build_timetable(&c, M, costs, 0, &chosen, why, sizeof why, &err), FG_OK);
            ScheduleSpec spec = pipeline_schedule_spec(&c, M, costs);
            spec.mode = chosen.mode, spec.select = chosen.select, spec.lag = chosen.lag;
            if (schedule_check(&chosen, &spec, &err)) fail_msg("%s", err.msg);
            assert_non_null(strstr(why, "c alone"));
            double best = pipeline_weighed_exact_rate(&chosen, lag_costs[i]);
            assert_true(best > 0);  // every stage learns
            for (int lag = -1; lag <= 2; lag++) {  // -1: bp-zb's timetable
                Config all = c;
                all.timetable.select = 4, all.timetable.lag = lag < 0 ? 0 : lag;
                if (lag < 0) all.method.mode = MODE_BP, all.timetable.schedule = SCHEDULE_ZB;
                Schedule S;
                assert_int_equal(pipeline_build_timetable(&all, M, costs, 0, &S, NULL, 0, &err), FG_OK);
                assert_true(pipeline_weighed_exact_rate(&S, lag_costs[i]) <= best * (1 + 1e-12));
                schedule_free(&S);
            }
            schedule_free(&chosen);
        }
}

// Lag weighs: with lag free (lag_cost 0) a timetable with lags beats lag 0 on these costs; made
// expensive, lag 0 wins, and at lag 0 bp-zb's interleaved timetable beats fg+bp's.
static void test_lag_cost_moves_the_choice(void **state) {
    (void)state;
    double costs[N_OP_COSTS * M];
    uniform_costs(1.0, 0.5, 0.5, 0.2, costs);
    Config c = c_alone();
    Schedule S;
    FgError err = {0};
    c.timetable.lag_cost = 0.0;
    assert_int_equal(pipeline_build_timetable(&c, M, costs, 0, &S, NULL, 0, &err), FG_OK);
    int free_lag = 0;
    for (int s = 0; s < M; s++) free_lag = FG_MAX(free_lag, schedule_stage_bubbles(&S, s).max_lag);
    schedule_free(&S);
    c.timetable.lag_cost = 10.0;  // lag 0: bp-zb's timetable, shorter than fg+bp's at lag 0
    assert_int_equal(pipeline_build_timetable(&c, M, costs, 0, &S, NULL, 0, &err), FG_OK);
    assert_int_equal(S.mode, SCHED_BP_ZB);
    for (int s = 0; s < M; s++) assert_int_equal(schedule_stage_bubbles(&S, s).corrections, 4);
    schedule_free(&S);
    assert_true(free_lag >= 1);
}

// No choice outside c alone: an explicit select, or fg weighed above 0.
static void test_no_choice_elsewhere(void **state) {
    (void)state;
    double costs[N_OP_COSTS * M];
    uniform_costs(1.0, 0.5, 0.5, 0.2, costs);
    Config c = c_alone();
    c.method.shrink = 0.5;
    Schedule S;
    char why[256];
    FgError err = {0};
    assert_int_equal(pipeline_build_timetable(&c, M, costs, 0, &S, why, sizeof why, &err), FG_OK);
    assert_int_equal(S.select, -1);
    assert_string_equal(why, "");
    schedule_free(&S);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chooses_the_best_candidate),
        cmocka_unit_test(test_lag_cost_moves_the_choice),
        cmocka_unit_test(test_no_choice_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
