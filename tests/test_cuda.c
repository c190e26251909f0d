// The CUDA backend against the CPU reference: every backend op on the same inputs, then whole
// models (bp gradients and fg directional derivatives with the same tangents).
// Tolerances: tangents bit-identical (counter-based generator, no FMA contraction); GEMM-based
// results within 1e-4 relative to the largest magnitude (FP32 sums in another order); scalars
// summed in double within 1e-6. Without a GPU it exits 77, which ctest reports as skipped.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test_util.h"

static void test_tangents_bit_identical(void **state) {
    (void)state;
    size_t sizes[] = {1, 255, 256, 1000, 65536 + 77, 300000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        TangentKey key = {.seed = 7 + (uint32_t)s, .stream = STREAM_TANGENT, .step = 3,
                          .microbatch = 2, .layer = 5, .k = 1};
        float *want = fg_alloc_floats(n), *dev = backend_alloc_floats(&gpu, n);
        cpu->tangent_fill(cpu, key, n, want, NULL);
        gpu.tangent_fill(&gpu, key, n, dev, NULL);
        float *got = from_gpu(dev, n);
        if (memcmp(got, want, n * sizeof(float)) != 0) fail_msg("tangent_fill: n = %zu not bit-identical", n);

        // axpy over (b, k) in the same order: the same float roundings.
        int n_mb = 3, K = 2;
        float coeff[6] = {0.5f, -1.25f, 2.0f, 0.1f, -0.3f, 1.0f};
        float *y = random_floats(n, 11 + s), *ydev = on_gpu(y, n);
        cpu->tangent_axpy(cpu, key, n_mb, K, coeff, n, y);
        gpu.tangent_axpy(&gpu, key, n_mb, K, coeff, n, ydev);
        assert_close(ydev, y, n, 1e-6, "tangent_axpy");

        double dc[6] = {0}, dg[6] = {0};
        cpu->tangent_dot(cpu, key, n_mb, K, n, y, dc);
        gpu.tangent_dot(&gpu, key, n_mb, K, n, ydev, dg);
        for (int i = 0; i < n_mb * K; i++)
            if (fabs(dg[i] - dc[i]) > 1e-9 * (1.0 + fabs(dc[i])))
                fail_msg("tangent_dot[%d], n = %zu: GPU %.17g, CPU %.17g", i, n, dg[i], dc[i]);
        fg_free(want), fg_free(got), fg_free(y);
        gpu.free(&gpu, dev), gpu.free(&gpu, ydev);
    }
}

// Activity tangents (rows of `width`, a coefficient per row): into K blocks, and every k
// into one block; the same float roundings as the CPU.
static void test_activity_tangents(void **state) {
    (void)state;
    int K = 3, shapes[][2] = {{1, 1}, {32, 10}, {64, 1024}, {7, 333}};
    TangentKey key = {.seed = 9, .stream = STREAM_ACTIVITY, .step = 4, .microbatch = 1, .layer = 2};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], width = shapes[s][1];
        size_t n = (size_t)rows * width;
        float *coeff = random_floats((size_t)K * rows, 30 + s);
        float *y = random_floats(n * K, 40 + s), *ydev = on_gpu(y, n * K);
        cpu->tangent_add_rows(cpu, key, K, rows, width, NULL, y, n, width);
        gpu.tangent_add_rows(&gpu, key, K, rows, width, NULL, ydev, n, width);
        assert_close(ydev, y, n * K, 0.0, "tangent_add_rows, K blocks");
        cpu->tangent_add_rows(cpu, key, K, rows, width, coeff, y, 0, width);
        gpu.tangent_add_rows(&gpu, key, K, rows, width, coeff, ydev, 0, width);
        assert_close(ydev, y, n * K, 0.0, "tangent_add_rows, one block");
        fg_free(coeff), fg_free(y);
        gpu.free(&gpu, ydev);
    }
}

static void test_vectors_and_optimizers(void **state) {
    (void)state;
    size_t n = 100003;
    float *a = random_floats(n, 1), *b = random_floats(n, 2);
    float *da = on_gpu(a, n), *db = on_gpu(b, n);
    double want = cpu->dot(cpu, a, b, n), got = gpu.dot(&gpu, da, db, n);
    if (fabs(got - want) > 1e-9 * fabs(want)) fail_msg("dot: GPU %.17g, CPU %.17g", got, want);
    cpu->scale(cpu, b, -0.75f, a, n);
    gpu.scale(&gpu, db, -0.75f, da, n);
    assert_close(db, b, n, 0, "scale");
    for (int kind = OPT_SGD; kind <= OPT_ADAM; kind++) {
        OptimizerConfig oc = {.kind = kind, .lr = 1e-2, .momentum = 0.9, .beta1 = 0.9,
                              .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
        size_t ns = n * optimizer_state_buffers(kind);
        float *p = random_floats(n, 3), *st = random_floats(ns, 4);
        for (size_t i = 0; i < ns; i++) st[i] = fabsf(st[i]);  // Adam's v is >= 0
        float *dp = on_gpu(p, n), *dst = on_gpu(st, ns);
        for (long step = 0; step < 3; step++) {
            cpu->optimizer_step(cpu, &oc, step, oc.lr, p, p, a, 0.5f, st, n, n);
            gpu.optimizer_step(&gpu, &oc, step, oc.lr, dp, dp, da, 0.5f, dst, n, n);
        }
        assert_close(dp, p, n, 1e-6, kind == OPT_SGD ? "sgd params" : "adam params");
        assert_close(dst, st, ns, 1e-6, kind == OPT_SGD ? "sgd state" : "adam state");
        fg_free(p), fg_free(st), gpu.free(&gpu, dp), gpu.free(&gpu, dst);
    }
    fg_free(a), fg_free(b), gpu.free(&gpu, da), gpu.free(&gpu, db);
}

// Every MLP layer kind and shape: forward, jvp (with and without input and parameter
// tangents), backward (fused, without dx, and each half alone), within 1e-4.
static void check_layer(LayerKind kind, int in, int out, int B, int K) {
    Layer L = {.kind = kind, .in = in, .out = kind == LAYER_LINEAR ? out : in};
    snprintf(L.name, sizeof L.name, "%s", layer_ops(&L)->kind_name);
    L.param_count = layer_ops(&L)->param_count(&L);
    char tag[32];
    snprintf(tag, sizeof tag, "%dx%d", in, out);
    check_layer_ops(&L, B, K, 1e-4, tag);
}

static void test_layers(void **state) {
    (void)state;
    int shapes[][4] = {{1, 1, 1, 1}, {7, 5, 3, 2}, {784, 256, 32, 4}, {1024, 1024, 64, 2}, {33, 10, 1, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kind = LAYER_LINEAR; kind <= LAYER_GELU; kind++)  // the GPT's: test_cuda_gpt.c
            check_layer((LayerKind)kind, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
}

static void test_loss(void **state) {
    (void)state;
    int B = 37, C = 10, K = 3;
    float *z = random_floats((size_t)B * C, 5), *zdot = random_floats((size_t)K * B * C, 6);
    for (int i = 0; i < B * C; i++) z[i] *= 5.0f;
    Label labels[37];
    for (int r = 0; r < B; r++) labels[r] = (Label)((r * 7) % C);
    float *dz = fg_alloc_floats((size_t)B * C), d[3], gd[3];
    float *g_z = on_gpu(z, (size_t)B * C), *g_zdot = on_gpu(zdot, (size_t)K * B * C);
    float *g_dz = backend_alloc_floats(&gpu, (size_t)B * C);
    Label *g_labels = gpu.alloc(&gpu, (size_t)B * sizeof(Label));
    gpu.upload(&gpu, g_labels, labels, (size_t)B * sizeof(Label));
    int hits, ghits;
    float want = cpu->loss_forward(cpu, z, labels, B, logit_rows(C), &hits);
    float got = gpu.loss_forward(&gpu, g_z, g_labels, B, logit_rows(C), &ghits);
    assert_true(fabsf(got - want) <= 1e-6f * fmaxf(1.0f, want));
    assert_int_equal(ghits, hits);
    cpu->loss_jvp(cpu, z, zdot, labels, B, logit_rows(C), K, d);
    gpu.loss_jvp(&gpu, g_z, g_zdot, g_labels, B, logit_rows(C), K, gd);
    for (int k = 0; k < K; k++)
        if (fabsf(gd[k] - d[k]) > 1e-5f * fmaxf(1.0f, fabsf(d[k]))) fail_msg("loss_jvp d[%d]: GPU %g, CPU %g", k, gd[k], d[k]);
    float rows[3 * 37], grows[3 * 37];  // per sample (activity perturbation)
    cpu->loss_jvp_rows(cpu, z, zdot, labels, B, logit_rows(C), K, rows);
    gpu.loss_jvp_rows(&gpu, g_z, g_zdot, g_labels, B, logit_rows(C), K, grows);
    for (int i = 0; i < K * B; i++)
        if (fabsf(grows[i] - rows[i]) > 1e-5f * fmaxf(1.0f, fabsf(rows[i])))
            fail_msg("loss_jvp_rows[%d]: GPU %g, CPU %g", i, grows[i], rows[i]);
    cpu->loss_backward(cpu, z, labels, B, logit_rows(C), dz);
    gpu.loss_backward(&gpu, g_z, g_labels, B, logit_rows(C), g_dz);
    assert_close(g_dz, dz, (size_t)B * C, 1e-6, "loss_backward");
    fg_free(z), fg_free(zdot), fg_free(dz);
    gpu.free(&gpu, g_z), gpu.free(&gpu, g_zdot), gpu.free(&gpu, g_dz), gpu.free(&gpu, g_labels);
}

// Whole MLPs, one stage per backend: the bp gradient of one micro-batch (fused, and as Bi
// then Bw) and the fg directional derivatives d_k along the same regenerated tangents.
static void test_whole_model(void **state) {
    (void)state;
    const char *acts[] = {"relu", "gelu"};
    for (int a = 0; a < 2; a++) {
        Model m;
        FgError err = {0};
        assert_int_equal(model_build_mlp(&m, "784-256-128-10", acts[a], &err), FG_OK);
        enum { B = 16, K = 4 };
        float *params = fg_alloc_floats(m.n_params);
        model_init_params(&m, params, 1);
        float *x = random_floats((size_t)B * 784, 7);
        Label labels[B];
        for (int r = 0; r < B; r++) labels[r] = (Label)(r % 10);
        compare_model(&m, params, B, x, labels, K, 1e-4, acts[a]);
        fg_free(params), fg_free(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tangents_bit_identical),
        cmocka_unit_test(test_activity_tangents),
        cmocka_unit_test(test_vectors_and_optimizers),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_loss),
        cmocka_unit_test(test_whole_model),
    };
    return run_gpu_tests("test_cuda", tests, sizeof tests / sizeof tests[0]);
}
