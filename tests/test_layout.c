// The cut into stages (boundaries = auto): timings that differ by noise give the same cut, and
// a cut by measured work replaces the one by parameter counts only when it is clearly better.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "config.h"
#include "train_internal.h"

// A layer's step work ~ its parameters, each draw off by up to +-noise (a fixed LCG: the test is
// the same every run).
static void noisy_costs(const Model *m, double noise, uint32_t *seed, double *cost) {
    memset(cost, 0, (size_t)m->n_layers * N_OP_COSTS * sizeof(double));
    for (int l = 0; l < m->n_layers; l++) {
        *seed = *seed * 1664525u + 1013904223u;
        double u = (double)(*seed >> 8) / (double)(1u << 24);  // [0, 1)
        cost[l * N_OP_COSTS + COST_F] = 1e-9 * (m->layers[l].param_count + 1) * (1 + noise * (2 * u - 1));
    }
}

// The main job's MLP on 4 stages: 100 draws of +-40% noise per layer all cut by parameters (a
// load of 10 on 2 cores moved the main job's timed stages by more; with no margin, draws here
// cut otherwise).
static void test_noise_cuts_alike(void **state) {
    (void)state;
    Config c;
    FgError err = {0};
    config_defaults(&c);
    assert_int_equal(config_set(&c, "mode", "fg+bp", &err), FG_OK);
    Model m;
    assert_int_equal(model_build_mlp(&m, "784-768-768-768-768-768-768-768-768-10", "relu", &err), FG_OK);
    int by_params[5], layout[5], by_work = -1;
    assert_int_equal(layout_cut(&c, &m, 4, NULL, by_params, NULL, NULL, NULL, 0, &err), FG_OK);
    double cost[64 * N_OP_COSTS], work[4];
    uint32_t seed = 1;
    for (int draw = 0; draw < 100; draw++) {
        char why[160];
        noisy_costs(&m, 0.4, &seed, cost);
        assert_int_equal(layout_cut(&c, &m, 4, cost, layout, work, &by_work, why, sizeof why, &err), FG_OK);
        assert_memory_equal(layout, by_params, sizeof layout);
        assert_true(work[0] > 0);
    }
}

// A layer with many parameters and little work (a token table's lookup): the measured cut wins,
// says so, and the work it balanced is reported.
static void test_clear_gain_cuts_by_work(void **state) {
    (void)state;
    Config c;
    FgError err = {0};
    config_defaults(&c);
    Model m;
    assert_int_equal(model_build_mlp(&m, "4096-512-512-512-512-512-512-10", "relu", &err), FG_OK);
    double cost[64 * N_OP_COSTS];
    uint32_t seed = 7;
    noisy_costs(&m, 0.0, &seed, cost);
    cost[0 * N_OP_COSTS + COST_F] *= 0.05;  // fc1: nearly free
    int by_params[3], layout[3], by_work = 0;
    char why[160];
    assert_int_equal(layout_cut(&c, &m, 2, NULL, by_params, NULL, NULL, NULL, 0, &err), FG_OK);
    assert_int_equal(layout_cut(&c, &m, 2, cost, layout, NULL, &by_work, why, sizeof why, &err), FG_OK);
    assert_int_equal(by_work, 1);
    assert_true(layout[1] > by_params[1]);  // stage 0 takes more layers than their parameters say
    assert_non_null(strstr(why, "over 33% less"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noise_cuts_alike),
        cmocka_unit_test(test_clear_gain_cuts_by_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
