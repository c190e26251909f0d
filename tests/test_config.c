// Config parsing: every bad input is refused with a message that names the key and the cause.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "mem_account.h"
#include "run_plan.h"

static void expect_error(Config *c, const char *key, const char *value, const char *needle) {
    FgError err = {0};
    assert_int_equal(config_set(c, key, value, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_set_values(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    FgError err = {0};
    assert_int_equal(config_set(&c, "mode", "fg", &err), FG_OK);
    assert_int_equal(c.method.mode, MODE_FG);
    assert_int_equal(config_set(&c, "lr", "3e-4", &err), FG_OK);
    assert_true(c.optim.lr == 3e-4);
    assert_int_equal(config_set(&c, "seed", "4294967295", &err), FG_OK);
    assert_int_equal(c.training.seed, 4294967295u);
    assert_int_equal(config_set(&c, "optimizer", "sgd", &err), FG_OK);
    assert_int_equal(c.optim.optimizer, OPT_SGD);
}

static void test_bad_values(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    expect_error(&c, "colour", "red", "unknown config key 'colour'");
    expect_error(&c, "colour", "red", "micro_batch");  // lists the known keys
    expect_error(&c, "mode", "sideways", "bp|fg");
    expect_error(&c, "lr", "fast", "lr: 'fast' is not a number");
    expect_error(&c, "lr", "1e-3x", "not a number");
    expect_error(&c, "lr", "nan", "not a number");
    expect_error(&c, "epochs", "1.5", "whole number");
    expect_error(&c, "tangents", "0", "outside [1, 4096]");
    expect_error(&c, "micro_batch", "-4", "outside");
    expect_error(&c, "seed", "4294967296", "outside");
    expect_error(&c, "model", "", "model");
}

static char *write_temp(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/fgpipe-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_load_file(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    FgError err = {0};
    char *path = write_temp("# comment\n\nmode = fg   # trailing comment\n  tangents=4\nlr = 0.01\n");
    assert_int_equal(config_load(&c, path, &err), FG_OK);
    assert_int_equal(c.method.mode, MODE_FG);
    assert_int_equal(c.method.tangents, 4);
    assert_true(c.optim.lr == 0.01);
    unlink(path);

    // The resolved config written by config_write loads back to the same values.
    char dump[] = "/tmp/fgpipe-dump-XXXXXX";
    int fd = mkstemp(dump);
    FILE *f = fdopen(fd, "w");
    config_write(&c, f);
    fclose(f);
    Config d;
    config_defaults(&d);
    assert_int_equal(config_load(&d, dump, &err), FG_OK);
    assert_memory_equal(&c, &d, offsetof(Config, chosen));  // d has every key chosen
    unlink(dump);
}

// fg+bp's defaults follow the mode wherever it is set; a key set in a file or by --set wins,
// in either order; bp's schedule is zb.
static void test_mode_defaults(void **state) {
    (void)state;
    Config c;
    FgError err = {0};
    config_defaults(&c);
    assert_int_equal(c.timetable.schedule, SCHEDULE_ZB);
    assert_int_equal(c.method.perturb, PERTURB_WEIGHT);
    assert_int_equal(config_set(&c, "mode", "fg+bp", &err), FG_OK);
    assert_int_equal(c.method.perturb, PERTURB_ACTIVITY);
    assert_int_equal(c.method.estimator, EST_MIX);
    assert_true(c.method.shrink == 0.0);
    assert_null(config_warning(&c));
    assert_int_equal(config_set(&c, "mode", "bp", &err), FG_OK);  // back to the global ones
    assert_int_equal(c.method.perturb, PERTURB_WEIGHT);
    assert_int_equal(c.method.estimator, EST_AUTO);
    assert_true(c.method.shrink == 1.0);

    config_defaults(&c);  // a chosen key wins, set before or after the mode
    assert_int_equal(config_set(&c, "shrink", "0.5", &err), FG_OK);
    assert_int_equal(config_set(&c, "mode", "fg+bp", &err), FG_OK);
    assert_true(c.method.shrink == 0.5);
    assert_int_equal(c.method.perturb, PERTURB_ACTIVITY);
    assert_int_equal(config_set(&c, "schedule", "gpipe", &err), FG_OK);
    assert_int_equal(c.timetable.schedule, SCHEDULE_GPIPE);

    // A chosen key that needs weight tangents keeps perturb at weight (and cv's shrink at 1).
    static const char *const needs_weight[][2] = {{"estimator", "cv"}, {"estimator", "guided"},
                                                  {"tangent_rank", "2"}, {"cv_scale", "auto"}};
    for (int i = 0; i < 4; i++) {
        config_defaults(&c);
        assert_int_equal(config_set(&c, "mode", "fg+bp", &err), FG_OK);
        assert_int_equal(config_set(&c, needs_weight[i][0], needs_weight[i][1], &err), FG_OK);
        assert_int_equal(c.method.perturb, PERTURB_WEIGHT);
        assert_true(c.method.shrink == 1.0);
        assert_int_equal(config_validate(&c, &err), FG_OK);
    }

    // LoRA (and the token table's row blocks) take weight tangents only: fg+bp follows them,
    // set before or after the mode, and an explicit activity is still refused by name.
    static const char *const lora[][2] = {{"model", "llama"}, {"data", "text"}, {"text_file", "t.txt"},
                                          {"lora_rank", "4"}};
    for (int order = 0; order < 2; order++) {
        config_defaults(&c);
        if (order) assert_int_equal(config_set(&c, "mode", "fg+bp", &err), FG_OK);
        for (int k = 0; k < 4; k++) assert_int_equal(config_set(&c, lora[k][0], lora[k][1], &err), FG_OK);
        if (!order) assert_int_equal(config_set(&c, "mode", "fg+bp", &err), FG_OK);
        assert_int_equal(c.method.perturb, PERTURB_WEIGHT);
        assert_int_equal(config_estimator(&c), EST_CV);
        assert_int_equal(config_validate(&c, &err), FG_OK);
    }
    assert_int_equal(config_set(&c, "perturb", "activity", &err), FG_OK);
    assert_int_equal(config_validate(&c, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "lora_rank"));

    // weight with cv at K = 1 (auto resolves to cv) warns with the figure; K = 2 does not.
    char *path = write_temp("mode = fg+bp\nperturb = weight\n");
    config_defaults(&c);
    assert_int_equal(config_load(&c, path, &err), FG_OK);
    unlink(path);
    assert_int_equal(config_estimator(&c), EST_CV);
    assert_non_null(config_warning(&c));
    assert_non_null(strstr(config_warning(&c), "3.16 nats/byte"));
    assert_int_equal(config_set(&c, "tangents", "2", &err), FG_OK);
    assert_null(config_warning(&c));
}

static void test_load_errors(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    FgError err = {0};
    assert_int_equal(config_load(&c, "/nonexistent/x.conf", &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent/x.conf"));
    assert_non_null(strstr(err.msg, "No such file"));

    char *path = write_temp("mode = bp\nthis line has no equals sign\n");
    assert_int_equal(config_load(&c, path, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, ":2:"));  // names the line
    unlink(path);

    path = write_temp("mode = bp\nepochs = many\n");
    assert_int_equal(config_load(&c, path, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, ":2: epochs: 'many' is not a number"));
    unlink(path);
}

static void test_validate(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    FgError err = {0};
    assert_int_equal(config_validate(&c, &err), FG_OK);
    c.training.steps = 0, c.training.epochs = 0;
    assert_int_equal(config_validate(&c, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "steps"));
    config_defaults(&c);
    c.optim.min_lr = 1.0;
    assert_int_equal(config_validate(&c, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "min_lr"));
    // Language models: each data kind names its files; bytes are a vocabulary of 256.
    const struct { const char *sets[4][2]; const char *needle; } lang[] = {
        {{{"model", "gpt"}, {"data", "idx"}}, "model = gpt reads text or tokens"},
        {{{"model", "gpt"}, {"data", "text"}}, "data = text needs text_file"},
        {{{"model", "gpt"}, {"data", "text"}, {"text_file", "t.txt"}, {"vocab", "50257"}}, "vocab must be 256"},
        {{{"model", "gpt"}, {"data", "tokens"}, {"train_tokens", "t.bin"}}, "needs train_tokens and val_tokens"},
        {{{"data", "tokens"}}, "data = text or tokens trains model = gpt"},
    };
    for (size_t i = 0; i < sizeof lang / sizeof lang[0]; i++) {
        config_defaults(&c);
        for (int k = 0; k < 4 && lang[i].sets[k][0]; k++)
            assert_int_equal(config_set(&c, lang[i].sets[k][0], lang[i].sets[k][1], &err), FG_OK);
        assert_int_equal(config_validate(&c, &err), FG_ERR_INPUT);
        if (!strstr(err.msg, lang[i].needle)) fail_msg("case %zu: \"%s\"", i, err.msg);
    }
    config_defaults(&c);
    const char *ok[][2] = {{"model", "gpt"}, {"data", "tokens"}, {"train_tokens", "t.bin"},
                           {"val_tokens", "v.bin"}, {"vocab", "50257"}, {"pad_vocab", "64"}};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
        assert_int_equal(config_set(&c, ok[k][0], ok[k][1], &err), FG_OK);
    assert_int_equal(config_validate(&c, &err), FG_OK);
    assert_true(config_is_language(&c));
    assert_string_equal(config_data_path(&c), "t.bin");
    assert_int_equal(config_set(&c, "vocab", "151936", &err), FG_OK);  // Qwen3's: uint32 ids
    assert_int_equal(config_set(&c, "vocab", "16777217", &err), FG_ERR_INPUT);  // not exact as a float
}

// LoRA: targets parse to their bits; what LoRA has not got is refused by name.
static void test_lora_keys(void **state) {
    (void)state;
    FgError err = {0};
    int mask = 0;
    assert_int_equal(config_lora_targets("q, v,down", &mask, &err), FG_OK);
    assert_int_equal(mask, LORA_Q | LORA_V | LORA_DOWN);
    assert_int_equal(config_lora_targets("q,proj", &mask, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "'proj' is not one of"));
    const struct { const char *key, *value, *needle; } bad[] = {
        {"lora_dropout", "0.05", "lora_dropout = 0.05: only 0"},
        {"lora_targets", "q,gate,mlp", "'mlp' is not one of"},
        {"model", "gpt", "for model = llama only"},
        {"perturb", "activity", "perturb = weight"},
        {"tangent_rank", "2", "tangent_rank = 0"},
        {"lora_alpha", "0", "lora_alpha = 0"},
    };
    for (size_t i = 0; i <= sizeof bad / sizeof bad[0]; i++) {
        Config c;
        config_defaults(&c);
        const char *sets[][2] = {{"model", "llama"}, {"data", "text"}, {"text_file", "t.txt"},
                                 {"mode", "fg"}, {"lora_rank", "4"}, {"lora_targets", "q,k,v,o"}};
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
            assert_int_equal(config_set(&c, sets[k][0], sets[k][1], &err), FG_OK);
        if (i == sizeof bad / sizeof bad[0]) {  // the good one, and on the GPU (cuda/lora_cuda.cu)
            assert_int_equal(config_validate(&c, &err), FG_OK);
            assert_int_equal(config_set(&c, "device", "cuda", &err), FG_OK);
            assert_int_equal(config_validate(&c, &err), FG_OK);
            continue;
        }
        assert_int_equal(config_set(&c, bad[i].key, bad[i].value, &err), FG_OK);
        assert_int_equal(config_validate(&c, &err), FG_ERR_INPUT);
        if (!strstr(err.msg, bad[i].needle)) fail_msg("%s = %s: \"%s\"", bad[i].key, bad[i].value, err.msg);
    }
}

// What a run computes follows from its options: where fg's weight is 0 (mix at shrink 0) op F
// runs without tangents, and every other fg+bp keeps them.
static void test_run_plan_tangents(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    FgError err = {0};
    const char *sets[][2] = {{"mode", "fg+bp"}, {"perturb", "activity"}, {"estimator", "auto"},
                             {"shrink", "0"}, {"tangents", "2"}};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        assert_int_equal(config_set(&c, sets[i][0], sets[i][1], &err), FG_OK);
    RunPlan r = run_plan(&c, 1);
    assert_int_equal(r.estimator, EST_MIX);
    assert_int_equal(r.tangents, 0);
    assert_int_equal(r.saves_inputs, 0);
    assert_int_equal(r.sends_tangents, 0);
    assert_int_equal(r.d_per_microbatch, 0);
    assert_true(r.forms_estimate);  // op U still weighs c
    c.method.shrink = 0.1;
    r = run_plan(&c, 1);
    assert_int_equal(r.tangents, 2);
    assert_true(r.saves_inputs && r.sends_tangents && r.d_per_sample);
    c.method.shrink = 0, c.method.estimator = EST_CV;  // only mix is lean at shrink 0
    assert_int_equal(run_plan(&c, 1).tangents, 2);
    c.method.mode = MODE_BP;
    r = run_plan(&c, 1);
    assert_int_equal(r.tangents, 0);
    assert_false(r.forms_estimate);
}

// precision = bf16 keeps BF16 storage on either device: the run plan and the layers' needs do
// not test the device, so a GPU stage's memory is counted (mem_account.c, fgpipe plan) as a
// CPU stage's, the weights' BF16 copy included; fp32 and tf32 keep none. A streamed GPU stage in
// bf16 is refused by name.
static void test_bf16_on_either_device(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    Model m;
    FgError err = {0};
    assert_int_equal(model_build_mlp(&m, "784-256-10", "relu", &err), FG_OK);
    double bytes[2][N_MEM_OWNERS] = {{0}}, fp32[N_MEM_OWNERS] = {0};
    const DeviceKind devices[2] = {DEVICE_CPU, DEVICE_CUDA};
    for (int d = 0; d < 2; d++) {
        c.layout.device = devices[d], c.layout.precision = PRECISION_BF16;
        assert_int_equal(run_plan(&c, 1).activations, FG_BF16);
        assert_true(layer_needs(&c).weights16);
        mem_resident_bytes(&c, &m, 0, m.n_layers, bytes[d]);
    }
    assert_memory_equal(bytes[0], bytes[1], sizeof bytes[0]);
    for (int p = PRECISION_FP32; p <= PRECISION_TF32; p++) {
        c.layout.precision = p;  // device = cuda
        assert_int_equal(run_plan(&c, 1).activations, FG_F32);
        assert_false(layer_needs(&c).weights16);
    }
    mem_resident_bytes(&c, &m, 0, m.n_layers, fp32);
    assert_true(bytes[1][MEM_WEIGHTS] == fp32[MEM_WEIGHTS] + 2.0 * (double)m.n_params);  // linears only
    c.layout.precision = PRECISION_BF16;
    assert_int_equal(config_validate(&c, &err), FG_OK);
    c.layout.mem_budget = 1e9;  // a streamed GPU stage in bf16 (issue 52: no longer refused)
    snprintf(c.layout.weights_dir, sizeof c.layout.weights_dir, "/tmp");
    assert_int_equal(config_validate(&c, &err), FG_OK);
    c.layout.precision = PRECISION_TF32;
    assert_int_equal(config_validate(&c, &err), FG_OK);
}

// key=value;key=value onto c.
static void set_all(Config *c, const char *list) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    FgError err = {0};
    for (char *save = NULL, *kv = strtok_r(copy, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        if (config_set(c, kv, eq + 1, &err)) fail_msg("%s", err.msg);
    }
}

// The keys that say what the model is (config.c's table marks them): the first on which a
// checkpoint's config a and the run's b differ, class by class (every model's, the MLP's
// activation, Llama's, LoRA's), or none where b runs a's weights as they are.
static void test_model_keys(void **state) {
    (void)state;
    const char *llama = "model=llama;data=tokens", *lora = "model=llama;data=tokens;lora_rank=4";
    const struct { const char *a, *b, *model_key, *store_key; } cases[] = {
        {llama, "rope_theta=500000", "rope_theta", "rope_theta"},
        {llama, "tie_embeddings=0;rope_theta=500000", "rope_theta", "rope_theta"},  // table order
        {llama, "rope_theta=500000;n_layer=2", "n_layer", "n_layer"},  // every model's key first
        {llama, "ctx=64;data=text", NULL, NULL},  // any ctx up to its own (RoPE), text or tokens
        {llama, "ctx=256", "ctx", "ctx"},
        {llama, "lora_rank=4", NULL, "lora_rank"},  // a base loads under new adapters
        {llama, "pad_vocab=64;lora_dropout=0.5", NULL, "pad_vocab"},
        {lora, "lora_alpha=8;lora_targets=q", "lora_alpha", "lora_alpha"},
        {lora, "lora_rank=0", "lora_rank", "lora_rank"},
        {"model=gpt;data=text", "rope_theta=500000;activation=gelu", NULL, NULL},  // not the GPT's
        {"model=gpt;data=text", "ctx=64", "ctx", "ctx"},  // the GPT's position table is ctx rows
        {"model=784-10", "activation=gelu;n_layer=2", "n_layer", "n_layer"},
        {"model=784-10", "activation=gelu;rope_theta=500000", "activation", "activation"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config a, b;
        config_defaults(&a);
        set_all(&a, cases[i].a);
        b = a;
        set_all(&b, cases[i].b);
        char va[64], vb[64];
        const char *key = config_model_mismatch(&a, &b, va, vb, sizeof va);
        const char *store = config_store_mismatch(&a, &b, va, vb, sizeof va);
        if ((key == NULL) != (cases[i].model_key == NULL) || (key && strcmp(key, cases[i].model_key)))
            fail_msg("%s, then %s: model key %s, not %s", cases[i].a, cases[i].b, key ? key : "none",
                     cases[i].model_key ? cases[i].model_key : "none");
        if ((store == NULL) != (cases[i].store_key == NULL) || (store && strcmp(store, cases[i].store_key)))
            fail_msg("%s, then %s: store key %s, not %s", cases[i].a, cases[i].b, store ? store : "none",
                     cases[i].store_key ? cases[i].store_key : "none");
    }
    Config a, b;  // the values come with the key, as the table writes them
    config_defaults(&a);
    set_all(&a, llama);
    b = a;
    set_all(&b, "rms_norm_eps=1e-5");
    char va[64], vb[64];
    assert_string_equal(config_model_mismatch(&a, &b, va, vb, sizeof va), "rms_norm_eps");
    assert_string_equal(va, "9.9999999999999995e-07");
    assert_string_equal(vb, "1.0000000000000001e-05");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_values), cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_load_file),  cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_mode_defaults),
        cmocka_unit_test(test_validate),  cmocka_unit_test(test_run_plan_tangents),
        cmocka_unit_test(test_bf16_on_either_device),
        cmocka_unit_test(test_lora_keys),  cmocka_unit_test(test_model_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
