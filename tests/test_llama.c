// Llama and Qwen3 (model_llama.c, docs/gpt.md "Llama and Qwen3") through the Stage API: the
// shapes and names of Qwen3-0.6B and Llama-3.2-1B (their published parameter counts), shapes
// refused by name, the tied copies' init; then, on tiny models with grouped-query attention,
// head_dim != n_embd / n_head, Llama 3's rope scaling, Qwen3's q/k norms, tied and untied
// heads: backprop of the whole chain against central differences and forward mode, causal
// masking, and activity perturbation's derivatives against backprop (lm_checks.h). Each op
// alone is checked in test_layers.c.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "lm_checks.h"

enum { SEED = 77 };

static LlamaShape qwen3_0_6b(void) {
    return (LlamaShape){.n_layer = 28, .n_embd = 1024, .n_head = 16, .n_kv_head = 8, .head_dim = 128,
                        .intermediate = 3072, .ctx = 256, .vocab = 151936, .pad_vocab = 1,
                        .rms_eps = 1e-6f, .rope = {.theta = 1e6f}, .qk_norm = 1,
                        .tie_embeddings = 1};
}

static LlamaShape llama_3_2_1b(void) {
    return (LlamaShape){.n_layer = 16, .n_embd = 2048, .n_head = 32, .n_kv_head = 8, .head_dim = 64,
                        .intermediate = 8192, .ctx = 256, .vocab = 128256, .pad_vocab = 1,
                        .rms_eps = 1e-5f,
                        .rope = {.theta = 500000, .factor = 32, .low = 1, .high = 4, .original = 8192},
                        .tie_embeddings = 1};
}

static void test_llama_shapes(void **state) {
    (void)state;
    static Model m;  // large: not on the stack
    FgError err = {0};
    assert_int_equal(model_build_llama(&m, qwen3_0_6b(), &err), FG_OK);
    // Qwen3-0.6B: 596,049,920 parameters (0.44B outside the embedding), plus the head's copy.
    assert_int_equal(m.n_params - 151936 * 1024, 596049920);
    assert_int_equal(m.n_layers, 1 + 10 * 28 + 2);
    assert_string_equal(m.tensors[0].name, "embed_tokens.weight");
    assert_string_equal(m.tensors[1].name, "layers.0.input_layernorm.weight");
    assert_string_equal(m.tensors[2].name, "layers.0.self_attn.q_proj.weight");
    assert_int_equal(m.tensors[2].rows, 16 * 128);
    assert_string_equal(m.tensors[3].name, "layers.0.self_attn.k_proj.weight");
    assert_int_equal(m.tensors[3].rows, 8 * 128);
    assert_string_equal(m.tensors[5].name, "layers.0.self_attn.q_norm.weight");
    assert_string_equal(m.tensors[7].name, "layers.0.self_attn.o_proj.weight");
    assert_int_equal(m.tensors[7].cols, 16 * 128);
    assert_string_equal(m.tensors[m.n_tensors - 2].name, "norm.weight");
    assert_string_equal(m.tensors[m.n_tensors - 1].name, "lm_head.weight");
    assert_int_equal(m.tied_last, m.n_layers - 1);
    assert_string_equal(m.layers[m.n_layers - 2].name, "norm");
    assert_string_equal(m.layers[11].name, "h.1.input_norm");
    // A layer store keeps 15 characters of a layer's name: they tell every layer apart.
    for (int a = 0; a < m.n_layers; a++)
        for (int b = a + 1; b < m.n_layers; b++)
            if (strncmp(m.layers[a].name, m.layers[b].name, 15) == 0)
                fail_msg("layers %s and %s share 15 characters", m.layers[a].name, m.layers[b].name);

    LlamaShape g = llama_3_2_1b();
    assert_int_equal(model_build_llama(&m, g, &err), FG_OK);
    assert_int_equal(m.n_params - 128256 * 2048, 1235814400);  // Llama-3.2-1B: 1.24B
    assert_int_equal(m.n_layers, 1 + 9 * 16 + 2);
    assert_string_equal(m.tensors[m.n_tensors - 4].name, "layers.15.mlp.up_proj.weight");
    g.tie_embeddings = 0;
    assert_int_equal(model_build_llama(&m, g, &err), FG_OK);
    assert_int_equal(m.tied_first, -1);

    g.n_kv_head = 5;
    assert_int_equal(model_build_llama(&m, g, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "n_kv_head 5 does not divide n_head 32"));
    g = llama_3_2_1b(), g.head_dim = 63;
    assert_int_equal(model_build_llama(&m, g, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "head_dim 63 is odd"));
    g = llama_3_2_1b(), g.rope.high = 0.5f;
    assert_int_equal(model_build_llama(&m, g, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "rope_scaling_high_freq_factor"));
}

// Tiny: n_embd 8, 4 query heads and 2 kv heads of 6 features, MLP 12, ctx 5, bytes.
static LlamaShape tiny(int qk_norm, int tied, float rope_factor) {
    return (LlamaShape){.n_layer = 2, .n_embd = 8, .n_head = 4, .n_kv_head = 2, .head_dim = 6,
                        .intermediate = 12, .ctx = 5, .vocab = 256, .pad_vocab = 1, .rms_eps = 1e-5f,
                        .rope = {.theta = 100, .factor = rope_factor, .low = 1, .high = 4, .original = 16},
                        .qk_norm = qk_norm, .tie_embeddings = tied};
}

static void check_tiny(LlamaShape g) {
    Model m;
    FgError err = {0};
    assert_int_equal(model_build_llama(&m, g, &err), FG_OK);
    float *p = fg_alloc_floats(m.n_params);
    model_init_params(&m, p, SEED);
    size_t wte = (size_t)g.vocab * g.n_embd, head = m.layers[m.n_layers - 1].param_offset;
    if (g.tie_embeddings) assert_memory_equal(p, p + head, wte * sizeof(float));
    else assert_true(memcmp(p, p + head, wte * sizeof(float)) != 0);
    assert_true(p[m.tensors[1].offset] == 1.0f);  // input_layernorm.weight starts at 1
    fg_free(p);
    p = lm_params(&m, SEED, 3);
    lm_check_gradients(&m, p, SEED, 3);
    lm_check_activity_d(&m, p, SEED, 4);
    fg_free(p);
}

static void test_llama_gqa_rope_scaling_untied(void **state) {
    (void)state;
    check_tiny(tiny(0, 0, 8));
}

static void test_qwen3_qk_norm_tied(void **state) {
    (void)state;
    check_tiny(tiny(1, 1, 0));
}

// LoRA (layer_lora.c): Llama-3.2-1B with rank 8 on q and v has PEFT's count of trainable
// parameters, 851968, under PEFT's names and shapes; every other layer is frozen; a bad setting
// is refused by name.
static void test_lora_shapes(void **state) {
    (void)state;
    static Model m;
    FgError err = {0};
    LlamaShape g = llama_3_2_1b();
    assert_int_equal(model_build_llama(&m, g, &err), FG_OK);
    size_t base = m.n_params;
    g.lora_rank = 8, g.lora_alpha = 16, g.lora_targets = LORA_Q | LORA_V;
    assert_int_equal(model_build_llama(&m, g, &err), FG_OK);
    size_t trainable = 0;
    int adapters = 0;
    for (int l = 0; l < m.n_layers; l++) {
        const Layer *L = &m.layers[l];
        assert_int_equal(L->frozen, L->kind != LAYER_LORA);
        if (!L->frozen) trainable += L->param_count, adapters++;
    }
    assert_int_equal(trainable, 851968);
    assert_int_equal(m.n_params, base + trainable);
    assert_int_equal(adapters, 16);
    int seen = 0;
    for (int t = 0; t < m.n_tensors; t++) {
        const TensorView *tv = &m.tensors[t];
        if (!strcmp(tv->name, "layers.3.self_attn.q_proj.lora_A.weight"))
            seen++, assert_true(tv->rows == 8 && tv->cols == 2048);
        if (!strcmp(tv->name, "layers.3.self_attn.v_proj.lora_B.weight"))
            seen++, assert_true(tv->rows == 512 && tv->cols == 8);
        assert_null(strstr(tv->name, "k_proj.lora"));
    }
    assert_int_equal(seen, 2);
    g.lora_targets = 0;
    assert_int_equal(model_build_llama(&m, g, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "lora_targets"));
}

// A tiny Llama with adapters on every projection: A ~ U(+-1/sqrt(in)) as PEFT draws it, B 0,
// and (with every parameter random, B too) backprop through adapters and frozen projections
// against central differences and forward mode.
static void test_lora_tiny(void **state) {
    (void)state;
    Model m;
    FgError err = {0};
    LlamaShape g = tiny(1, 1, 8);
    g.lora_rank = 2, g.lora_alpha = 3, g.lora_targets = 127;
    assert_int_equal(model_build_llama(&m, g, &err), FG_OK);
    float *p = fg_alloc_floats(m.n_params);
    model_init_params(&m, p, SEED);
    int a_tensors = 0;
    for (int t = 0; t < m.n_tensors; t++) {
        const TensorView *tv = &m.tensors[t];
        size_t n = (size_t)tv->rows * tv->cols;
        const float *v = p + tv->offset;
        if (strstr(tv->name, "lora_B")) {
            for (size_t i = 0; i < n; i++) assert_true(v[i] == 0.0f);
        } else if (strstr(tv->name, "lora_A")) {
            float bound = 1.0f / sqrtf((float)tv->cols), lo = bound, hi = -bound;
            for (size_t i = 0; i < n; i++) lo = fminf(lo, v[i]), hi = fmaxf(hi, v[i]);
            assert_true(lo >= -bound && hi <= bound && hi - lo > bound / 4);
            a_tensors++;
        }
    }
    assert_int_equal(a_tensors, 2 * 7);
    fg_free(p);
    p = lm_params(&m, SEED, 3);
    lm_check_gradients(&m, p, SEED, 3);
    fg_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_shapes),
        cmocka_unit_test(test_llama_gqa_rope_scaling_untied),
        cmocka_unit_test(test_qwen3_qk_norm_tied),
        cmocka_unit_test(test_lora_shapes),
        cmocka_unit_test(test_lora_tiny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
