// LoRA on the CUDA backend against the CPU reference (docs/gpt.md, "LoRA"): the adapter layer
// (cuda/lora_cuda.cu) and the projection that adds its delta (the linear layer's tail, plain
// and residual), on fused q/k/v (one, two or three parts adapted), gate/up and one-part
// projections at ranks 1 to 3, every op as check_layer_ops runs it (forward; jvp with both
// tangents, no input tangent, no parameter tangent; backward fused, dx only, dp only); then
// whole tiny Llamas with adapters: the bp gradient (fused and Bi + Bw), the loss and the fg
// derivatives. Tolerance 1e-4 relative to max(1, the largest CPU magnitude), as
// test_cuda_llama's. Without a GPU it exits 77 (skipped).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpu_test_util.h"

static const double TOL = 1e-4;

// n_layer, C, H, Hkv, d, I, T, rank, targets (LORA_* bits)
static const int SHAPES[][9] = {
    {1, 8, 2, 1, 4, 12, 1, 1, LORA_Q},                             // one token, q alone
    {1, 16, 4, 2, 6, 24, 5, 2, LORA_Q | LORA_V | LORA_DOWN},       // two of three, down
    {1, 32, 4, 1, 16, 40, 40, 3, 127},                             // every projection
    {1, 24, 3, 3, 8, 64, 33, 2, LORA_K | LORA_O | LORA_GATE},      // o residual, gate of gate/up
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

static Model lora_model(const int *v) {
    Model m;
    FgError err = {0};
    LlamaShape g = {.n_layer = v[0], .n_embd = v[1], .n_head = v[2], .n_kv_head = v[3], .head_dim = v[4],
                    .intermediate = v[5], .ctx = v[6], .vocab = 256, .pad_vocab = 1, .rms_eps = 1e-5f,
                    .rope = {.theta = 10000, .factor = 8, .low = 1, .high = 4, .original = 16},
                    .qk_norm = 1, .tie_embeddings = 1, .lora_rank = v[7], .lora_alpha = 3.0f,
                    .lora_targets = v[8]};
    if (model_build_llama(&m, g, &err)) fail_msg("model_build_llama: %s", err.msg);
    return m;
}

// Every adapter and every projection with a tail, on both backends: at least one of each per
// shape (else the shape tests nothing of LoRA).
static void test_lora_layers(void **state) {
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        Model m = lora_model(SHAPES[s]);
        char tag[64];
        snprintf(tag, sizeof tag, "C=%d T=%d r=%d targets=%d", SHAPES[s][1], SHAPES[s][6],
                 SHAPES[s][7], SHAPES[s][8]);
        int adapters = 0, tails = 0;
        for (int l = 0; l < m.n_layers; l++) {
            const Layer *L = &m.layers[l];
            if (L->kind != LAYER_LORA && !L->tail) continue;
            adapters += L->kind == LAYER_LORA, tails += L->tail > 0;
            check_layer_ops(L, 2, 2, TOL, tag);
        }
        assert_true(adapters > 0 && adapters == tails);
    }
}

static void test_whole_lora(void **state) {
    (void)state;
    for (size_t s = 0; s < N_SHAPES; s++) {
        int v[9];
        memcpy(v, SHAPES[s], sizeof v);
        v[0] = 2;  // two blocks
        Model m = lora_model(v);
        char what[64];
        snprintf(what, sizeof what, "llama with LoRA C=%d T=%d r=%d targets=%d", v[1], v[6], v[7], v[8]);
        compare_token_model(&m, 17 + s, TOL, what);  // B away from 0: the delta is not 0
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_layers),
        cmocka_unit_test(test_whole_lora),
    };
    return run_gpu_tests("test_cuda_lora", tests, sizeof tests / sizeof tests[0]);
}
