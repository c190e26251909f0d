// Llama's and Qwen3's layers on the CUDA backend against the CPU reference (docs/gpt.md,
// "Llama and Qwen3"): every layer of one-block models (the embedding without positions,
// RMSNorm with and without carry, the bias-free projections, q/k norms, the rotation with and
// without llama3 scaling, grouped-query attention with 1, 2 and 4 query heads per kv head,
// SwiGLU) on several shapes: forward, jvp (both tangents, no input tangent, no parameter
// tangent), backward (fused, dp only, Bi alone, Bw alone without the weights); then whole models:
// the bp gradient (fused and Bi + Bw), the loss and the fg directional derivatives. Tolerance
// 1e-4 relative to max(1, the largest CPU magnitude), as test_cuda_gpt's. Without a GPU it exits
// 77 (skipped).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpu_test_util.h"

static const double TOL = 1e-4;

// n_layer, C, H, Hkv, d, I, T, qk_norm, rope factor (0: none), tied
static Model llama_model(const int *v) {
    Model m;
    FgError err = {0};
    LlamaShape g = {.n_layer = v[0], .n_embd = v[1], .n_head = v[2], .n_kv_head = v[3], .head_dim = v[4],
                    .intermediate = v[5], .ctx = v[6], .vocab = 256, .pad_vocab = 1, .rms_eps = 1e-5f,
                    .rope = {.theta = 10000, .factor = (float)v[8], .low = 1, .high = 4, .original = 16},
                    .qk_norm = v[7], .tie_embeddings = v[9]};
    if (model_build_llama(&m, g, &err)) fail_msg("model_build_llama: %s", err.msg);
    return m;
}

static const int SHAPES[][10] = {
    {1, 8, 2, 1, 4, 12, 1, 1, 0, 1},     // one token, two query heads per kv head
    {1, 16, 4, 2, 6, 24, 5, 1, 8, 0},    // Qwen3's norms with llama3 scaling, untied
    {1, 32, 4, 1, 16, 40, 40, 0, 8, 1},  // four heads per kv head, T across a warp
    {1, 24, 3, 3, 8, 64, 33, 1, 0, 1},   // one kv head per head (the GPT's attention)
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

static void test_llama_layers(void **state) {
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        Model m = llama_model(SHAPES[s]);
        char tag[64];
        snprintf(tag, sizeof tag, "C=%d H=%d Hkv=%d d=%d T=%d", SHAPES[s][1], SHAPES[s][2],
                 SHAPES[s][3], SHAPES[s][4], SHAPES[s][6]);
        for (int l = 0; l < m.n_layers; l++) check_layer_ops(&m.layers[l], 2, 2, TOL, tag);
    }
}

static void test_whole_llama(void **state) {
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        int v[10];
        memcpy(v, SHAPES[s], sizeof v);
        v[0] = 2;  // two blocks
        Model m = llama_model(v);
        char what[64];
        snprintf(what, sizeof what, "llama C=%d H=%d Hkv=%d T=%d", v[1], v[2], v[3], v[6]);
        compare_token_model(&m, 7 + s, TOL, what);
    }
}

// Grouped-query attention on tensor cores (tf32, bf16: cuda/attention_gemm.cu) within the
// precision's bound of the CPU, every op, on every shape.
static void test_attention_tensor_cores(void **state) {
    (void)state;
    const int precisions[] = {PRECISION_TF32, PRECISION_BF16};
    const double tols[] = {1e-2, 5e-2};
    for (int i = 0; i < 2; i++) {
        FgError err = {0};
        if (backend_cuda_set_precision(&gpu, precisions[i], &err)) fail_msg("%s", err.msg);
        for (size_t s = 0; s < N_SHAPES; s++) {
            Model m = llama_model(SHAPES[s]);
            char tag[64];
            snprintf(tag, sizeof tag, "precision %d H=%d Hkv=%d T=%d", precisions[i], SHAPES[s][2],
                     SHAPES[s][3], SHAPES[s][6]);
            for (int l = 0; l < m.n_layers; l++)
                if (m.layers[l].kind == LAYER_ATTENTION) check_layer_ops(&m.layers[l], 2, 2, tols[i], tag);
        }
    }
    FgError err = {0};
    assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_FP32, &err), FG_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_layers),
        cmocka_unit_test(test_whole_llama),
        cmocka_unit_test(test_attention_tensor_cores),
    };
    return run_gpu_tests("test_cuda_llama", tests, sizeof tests / sizeof tests[0]);
}
