// End-to-end: a few hundred steps on Fashion-MNIST; the loss must fall (bp and fg).
// Needs Debian's dataset-fashion-mnist (launch/install-deps.sh installs it): fails if absent.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "config.h"
#include "train.h"

static TrainResult run(const char *mode, const char *optimizer, const char *steps, const char *lr) {
    Config c;
    config_defaults(&c);
    FgError err = {0};
    const char *sets[][2] = {{"model", "784-128-10"}, {"mode", mode}, {"steps", steps},
                             {"lr", lr},             {"warmup_steps", "0"}, {"print_every", "100"},
                             {"optimizer", optimizer}};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        assert_int_equal(config_set(&c, sets[i][0], sets[i][1], &err), FG_OK);
    TrainResult r;
    Transport local = transport_local();
    TrainEnv env = {&backend_cpu, &local, NULL, NULL};
    if (train_run(&c, &env, NULL, NULL, &r, &err)) fail_msg("train_run: %s", err.msg);
    printf("# %s: loss %.4f -> %.4f, test accuracy %.4f\n", mode, r.first_loss, r.final_loss,
           r.test_acc);
    return r;
}

static void test_bp_loss_falls(void **state) {
    (void)state;
    TrainResult r = run("bp", "adam", "300", "0.001");
    assert_int_equal(r.steps, 300);
    assert_true(r.final_loss < 0.5 * r.first_loss);
    assert_true(r.test_acc > 0.75);  // chance is 0.10
}

static void test_fg_loss_falls(void **state) {
    (void)state;
    TrainResult r = run("fg", "sgd", "300", "0.0001");
    assert_true(r.final_loss < 0.8 * r.first_loss);
    assert_true(r.test_acc > 0.3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bp_loss_falls),
        cmocka_unit_test(test_fg_loss_falls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
