// The GPT's layers on the CUDA backend against the CPU reference (docs/gpu.md): each layer of
// a one-block GPT (embedding, LayerNorm with and without carry, the linears with carry,
// residual and no bias, causal attention, GELU on the branch, the tied head) on random
// sequence shapes, n_head = 1 and ctx = 1 among them: forward, jvp (both tangents, no input
// tangent, no parameter tangent), backward (fused, dp only, Bi alone, Bw alone without the
// weights); then whole GPTs: the bp gradient (fused and Bi + Bw), the loss and the fg
// directional derivatives along the same regenerated tangents; tf32 and bf16 within their
// bounds; the bias fused into cuBLASLt's GEMM epilogue (carry, residual, no bias) in each;
// attention on tensor cores in tf32 and bf16.
// Tolerance 1e-4 relative to max(1, the largest CPU magnitude): FP32 sums in another order
// (GEMMs, the softmax's and LayerNorm's row sums). Without a GPU it exits 77 (skipped).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpu_test_util.h"
#include "head_loss.h"

static const double TOL = 1e-4;

static Model gpt_model(int n_layer, int C, int H, int T) {
    Model m;
    FgError err = {0};
    GptShape g = {.n_layer = n_layer, .n_embd = C, .n_head = H, .ctx = T, .vocab = 256, .pad_vocab = 1};
    if (model_build_gpt(&m, g, &err)) fail_msg("model_build_gpt: %s", err.msg);
    return m;
}

static void test_sequence_layers(void **state) {
    (void)state;
    // B, T (ctx), C (n_embd), H (n_head), K: hs from 4 to 96, T across a warp's 32 lanes.
    int shapes[][5] = {{1, 1, 4, 1, 1}, {2, 5, 8, 2, 2},   {3, 17, 12, 3, 1},
                       {2, 40, 64, 4, 3}, {1, 70, 96, 1, 2}, {1, 300, 128, 2, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], H = shapes[s][3], K = shapes[s][4];
        Model m = gpt_model(1, C, H, T);
        char tag[64];
        snprintf(tag, sizeof tag, "T=%d C=%d H=%d", T, C, H);
        for (int l = 0; l < m.n_layers; l++) check_layer_ops(&m.layers[l], B, K, TOL, tag);
    }
}

// Whole GPTs on one stage per backend, away from their init (so that attention is not
// uniform): bp gradients and fg derivatives as the MLPs' in test_cuda.c.
static void test_whole_gpt(void **state) {
    (void)state;
    int shapes[][5] = {{2, 32, 4, 16, 3}, {1, 8, 1, 1, 2}, {2, 24, 3, 40, 1}};  // n_layer, C, H, T, B
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int T = shapes[s][3], B = shapes[s][4], K = 3;
        Model m = gpt_model(shapes[s][0], shapes[s][1], shapes[s][2], T);
        float *params = fg_alloc_floats(m.n_params);
        model_init_params(&m, params, 1);
        Rng r = {99 + s};
        for (size_t i = 0; i < m.n_params; i++) params[i] += 0.1f * rng_uniform(&r);
        float *x = fg_alloc_floats((size_t)B * T);
        Label *labels = fg_alloc_bytes((size_t)B * T * sizeof(Label));
        for (int i = 0; i < B * T; i++) x[i] = (float)rng_int(&r, 0, 255), labels[i] = (Label)rng_int(&r, 0, 255);
        char what[64];
        snprintf(what, sizeof what, "gpt n_layer=%d C=%d H=%d T=%d", shapes[s][0], shapes[s][1], shapes[s][2], T);
        compare_model(&m, params, B, x, labels, K, TOL, what);
        fg_free(params), fg_free(x), fg_free(labels);
    }
}

// precision = tf32 and bf16: a linear layer (carry, strided rows) and a whole GPT stay within
// a bound of the CPU's FP32 (tf32: 1e-2, bf16: 5e-2, relative to max(1, the largest
// magnitude): inputs keep 10 and 7 mantissa bits), and the products do change (the mode is on).
static void test_precisions(void **state) {
    (void)state;
    Model m = gpt_model(1, 64, 4, 32);
    const Layer *fc = &m.layers[6];  // h.0.mlp.c_fc: [x, h] -> [x, u]
    assert_string_equal(fc->name, "h.0.mlp.c_fc");
    int precisions[] = {PRECISION_TF32, PRECISION_BF16};
    double tols[] = {1e-2, 5e-2};
    size_t nx = (size_t)2 * fc->in, ny = (size_t)2 * fc->out;
    float *p = random_floats(fc->param_count, 1), *x = random_floats(nx, 2), *y = fg_alloc_floats(ny);
    float *g_p = on_gpu(p, fc->param_count), *g_x = on_gpu(x, nx), *g_y = backend_alloc_floats(&gpu, ny);
    cpu->forward(cpu, fc, p, x, y, 2);
    for (int i = 0; i < 2; i++) {
        FgError err = {0};
        if (backend_cuda_set_precision(&gpu, precisions[i], &err)) fail_msg("%s", err.msg);
        gpu.forward(&gpu, fc, g_p, g_x, g_y, 2);
        float *got = from_gpu(g_y, ny);
        double e = rel_error(got, y, ny);
        if (!(e <= tols[i] && e > 0.0)) fail_msg("precision %d: c_fc forward differs by %.3g", precisions[i], e);
        fg_free(got);
        float *params = fg_alloc_floats(m.n_params), *ids = fg_alloc_floats(2 * 32);
        Label labels[64];
        model_init_params(&m, params, 1);
        for (int t = 0; t < 64; t++) ids[t] = (float)((t * 37) % 256), labels[t] = (Label)((t * 11) % 256);
        compare_model(&m, params, 2, ids, labels, 2, tols[i], precisions[i] == PRECISION_TF32 ? "tf32" : "bf16");
        fg_free(params), fg_free(ids);
    }
    FgError err = {0};
    assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_FP32, &err), FG_OK);
    fg_free(p), fg_free(x), fg_free(y);
    gpu.free(&gpu, g_p), gpu.free(&gpu, g_x), gpu.free(&gpu, g_y);
}

// Attention on tensor cores (tf32, bf16: cuda/attention_gemm.cu, scores through GEMMs): every
// op within the precision's bound of the CPU, a head of 160 features (beyond the FP32 tiles'
// 128) among the shapes; the forward repeats bit for bit and differs from FP32's (the path is on).
static void test_attention_tensor_cores(void **state) {
    (void)state;
    int shapes[][4] = {{1, 1, 4, 1}, {2, 40, 64, 4}, {1, 300, 128, 2}, {2, 33, 160, 1}};  // B, T, C, H
    const int precisions[] = {PRECISION_TF32, PRECISION_BF16};
    const double tols[] = {1e-2, 5e-2};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int B = shapes[sh][0], T = shapes[sh][1], C = shapes[sh][2], H = shapes[sh][3];
        Model m = gpt_model(1, C, H, T);
        const Layer *A = &m.layers[3];
        assert_string_equal(A->name, "h.0.attn");
        size_t nx = (size_t)B * A->in, ny = (size_t)B * A->out;
        float *x = layer_input(A, B, 5), *g_x = on_gpu(x, nx), *g_y = backend_alloc_floats(&gpu, ny);
        float *fp32 = NULL;
        FgError err = {0};
        if (C / H <= 128) {  // the FP32 tiles' limit
            gpu.forward(&gpu, A, NULL, g_x, g_y, B);
            fp32 = from_gpu(g_y, ny);
        }
        for (int i = 0; i < 2; i++) {
            if (backend_cuda_set_precision(&gpu, precisions[i], &err)) fail_msg("%s", err.msg);
            char tag[64];
            snprintf(tag, sizeof tag, "precision %d T=%d C=%d H=%d", precisions[i], T, C, H);
            check_layer_ops(A, B, 2, tols[i], tag);
            gpu.forward(&gpu, A, NULL, g_x, g_y, B);
            float *once = from_gpu(g_y, ny);
            gpu.forward(&gpu, A, NULL, g_x, g_y, B);
            float *twice = from_gpu(g_y, ny);
            if (memcmp(once, twice, ny * sizeof(float)) != 0) fail_msg("%s: forward not repeatable", tag);
            if (fp32 && T > 1 && memcmp(once, fp32, ny * sizeof(float)) == 0)
                fail_msg("%s: forward has FP32's bits: the tensor-core path did not run", tag);
            fg_free(once), fg_free(twice);
        }
        assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_FP32, &err), FG_OK);
        fg_free(x), fg_free(fp32);
        gpu.free(&gpu, g_x), gpu.free(&gpu, g_y);
    }
}

// The linears' bias as cuBLASLt's epilogue (cuda/gemm_lt.cu) in every precision: c_attn (bias,
// carry, the branch at an offset in the token), attn.c_proj (bias, residual: beta = 1) and the
// tied head (no bias: the plain GEMM) against the CPU, every op; the same bits on a second
// forward; and no bias GEMM left to the unfused fallback.
static void test_fused_bias(void **state) {
    (void)state;
    Model m = gpt_model(1, 64, 4, 32);
    const int layers[] = {2, 4, 10};
    const char *names[] = {"h.0.attn.c_attn", "h.0.attn.c_proj", "lm_head"};
    const int precisions[] = {PRECISION_FP32, PRECISION_TF32, PRECISION_BF16};
    const double tols[] = {TOL, 1e-2, 5e-2};
    long unfused = backend_cuda_unfused_bias_gemms(&gpu);
    for (int i = 0; i < 3; i++) {
        FgError err = {0};
        if (backend_cuda_set_precision(&gpu, precisions[i], &err)) fail_msg("%s", err.msg);
        for (int l = 0; l < 3; l++) {
            const Layer *L = &m.layers[layers[l]];
            assert_string_equal(L->name, names[l]);
            char tag[32];
            snprintf(tag, sizeof tag, "precision %d", precisions[i]);
            check_layer_ops(L, 2, 2, tols[i], tag);
            size_t nx = (size_t)2 * L->in, ny = (size_t)2 * L->out;
            float *p = random_floats(L->param_count, 3), *x = random_floats(nx, 4);
            float *g_p = on_gpu(p, L->param_count), *g_x = on_gpu(x, nx), *g_y = backend_alloc_floats(&gpu, ny);
            gpu.forward(&gpu, L, g_p, g_x, g_y, 2);
            float *once = from_gpu(g_y, ny);
            gpu.forward(&gpu, L, g_p, g_x, g_y, 2);
            float *twice = from_gpu(g_y, ny);
            if (memcmp(once, twice, ny * sizeof(float)) != 0) fail_msg("%s %s: forward not repeatable", tag, L->name);
            fg_free(p), fg_free(x), fg_free(once), fg_free(twice);
            gpu.free(&gpu, g_p), gpu.free(&gpu, g_x), gpu.free(&gpu, g_y);
        }
    }
    FgError err = {0};
    assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_FP32, &err), FG_OK);
    unfused = backend_cuda_unfused_bias_gemms(&gpu) - unfused;
    if (unfused) fail_msg("%ld GEMMs with a bias ran unfused (cuBLASLt had no kernel)", unfused);
}

// The fused head's activity tangents (per-row d, and op U's estimate) and low-rank ones (rank 2)
// on the GPU against the CPU's (host copies and device copies of the same W, x, xdot, labels).
static void check_head_tangents(const Layer *L, const float *W, const float *gW, const float *x,
                                const float *gx, const float *xdot, const float *gxdot,
                                const Label *labels, const Label *glabels, int B, int K, size_t c) {
    enum { R = 2, NMB = 2 };
    int rows = B * layer_tokens(L), C = layer_in_token(L);
    size_t n = (size_t)L->vocab * C;
    TangentKey key = activity_key(3, 1, 0, 9);
    float *dr = fg_alloc_floats((size_t)K * rows), *gdr = fg_alloc_floats((size_t)K * rows);
    float *rec = fg_alloc_floats((size_t)rows * HEAD_RECORD), *grec = backend_alloc_floats(&gpu, (size_t)rows * HEAD_RECORD);
    HeadTangents ta = {.activity = &key};
    cpu->head_jvp(cpu, L, W, x, xdot, labels, B, K, 1.0f, &ta, rec, dr);
    gpu.head_jvp(&gpu, L, gW, gx, gxdot, glabels, B, K, 1.0f, &ta, grec, gdr);
    if (rel_error(gdr, dr, (size_t)K * rows) > TOL) fail_msg("case %zu: activity row derivatives differ", c);
    float *coeff = random_floats((size_t)NMB * K * B, 11 + c), *x2 = fg_alloc_floats((size_t)NMB * rows * C);
    for (int m = 0; m < NMB; m++) memcpy(x2 + (size_t)m * rows * C, x, (size_t)rows * C * sizeof(float));
    float *dW = fg_alloc_floats(n), *gx2 = on_gpu(x2, (size_t)NMB * rows * C), *gdW = backend_alloc_floats(&gpu, n);
    cpu->head_activity_grad(cpu, L, key, K, NMB, B, coeff, x2, dW);
    gpu.head_activity_grad(&gpu, L, key, K, NMB, B, coeff, gx2, gdW);
    assert_close(gdW, dW, n, TOL, "fused head: activity estimate");
    float *At = random_floats((size_t)K * R * L->vocab, 12 + c), *P = random_floats((size_t)K * rows * R, 13 + c), d[4], gd[4];
    float *gAt = on_gpu(At, (size_t)K * R * L->vocab), *gP = on_gpu(P, (size_t)K * rows * R);
    HeadTangents tl = {.At = At, .P = P, .rank = R}, gtl = {.At = gAt, .P = gP, .rank = R};
    cpu->head_jvp(cpu, L, W, x, xdot, labels, B, K, 1.0f, &tl, rec, d);
    gpu.head_jvp(&gpu, L, gW, gx, gxdot, glabels, B, K, 1.0f, &gtl, grec, gd);
    for (int k = 0; k < K; k++)
        if (fabs(gd[k] - d[k]) > TOL * fmax(1.0, fabs(d[k]))) fail_msg("case %zu: low-rank d[%d] %g on the GPU, %g on the CPU", c, k, gd[k], d[k]);
    void *dev[] = {grec, gx2, gdW, gAt, gP};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu.free(&gpu, dev[i]);
    fg_free(dr), fg_free(gdr), fg_free(rec), fg_free(coeff), fg_free(x2), fg_free(dW), fg_free(At), fg_free(P);
}

// The head fused with the loss (head_loss.h, cuda/head_cuda.cu) against the CPU's: one block,
// several blocks with a padded vocabulary not a multiple of the block; the loss, the records,
// d, dx and dW (each half of the backward alone, as Bi and Bw run it), and its activity and
// low-rank tangents.
static void test_fused_head(void **state) {
    (void)state;
    int cases[][5] = {{256, 256, 4096, 2, 8}, {300, 320, 64, 3, 16}, {5000, 5056, 4096, 2, 24}};  // classes, vocab, block, B, C
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int V = cases[c][0], VP = cases[c][1], B = cases[c][3], C = cases[c][4], T = 5, K = 2;
        int rows = B * T;
        Layer L = {.kind = LAYER_HEAD_LOSS, .in = T * C, .out = T * HEAD_RECORD, .tokens = T,
                   .no_bias = 1, .vocab = VP, .classes = V, .head_block = cases[c][2]};
        size_t n = (size_t)VP * C;
        L.param_count = n;
        float *W = random_floats(n, 1 + c), *Wdot = random_floats(K * n, 2 + c);
        float *x = random_floats((size_t)rows * C, 3 + c), *xdot = random_floats((size_t)K * rows * C, 4 + c);
        Label *labels = fg_alloc_bytes((size_t)rows * sizeof(Label));
        for (int r = 0; r < rows; r++) labels[r] = (Label)((r * 7919 + 13) % V);
        float *rec = fg_alloc_floats((size_t)rows * HEAD_RECORD), d[2], dg[2];
        float *dx = fg_alloc_floats((size_t)rows * C), *dW = fg_alloc_floats(n);
        int hits, hits_g;
        HeadTangents tw = {.Wdot = Wdot};
        float loss = cpu->head_forward(cpu, &L, W, x, labels, B, 0.5f, rec, &hits);
        assert_true(cpu->head_jvp(cpu, &L, W, x, xdot, labels, B, K, 0.5f, &tw, rec, d) == loss);
        cpu->backward(cpu, &L, W, x, rec, dx, dW, B);
        float *gW = on_gpu(W, n), *gWdot = on_gpu(Wdot, K * n), *gx = on_gpu(x, (size_t)rows * C);
        float *gxdot = on_gpu(xdot, (size_t)K * rows * C), *grec = backend_alloc_floats(&gpu, (size_t)rows * HEAD_RECORD);
        float *gdx = backend_alloc_floats(&gpu, (size_t)rows * C), *gdW = backend_alloc_floats(&gpu, n);
        Label *glabels = gpu.alloc(&gpu, (size_t)rows * sizeof(Label));
        gpu.upload(&gpu, glabels, labels, (size_t)rows * sizeof(Label));
        float loss_g = gpu.head_forward(&gpu, &L, gW, gx, glabels, B, 0.5f, grec, &hits_g);
        if (fabs(loss_g - loss) > TOL * fmax(1.0, fabs(loss))) fail_msg("case %zu: loss %g on the GPU, %g on the CPU", c, loss_g, loss);
        assert_int_equal(hits_g, hits);
        HeadTangents gtw = {.Wdot = gWdot};
        gpu.head_jvp(&gpu, &L, gW, gx, gxdot, glabels, B, K, 0.5f, &gtw, grec, dg);
        for (int k = 0; k < K; k++)
            if (fabs(dg[k] - d[k]) > TOL * fmax(1.0, fabs(d[k]))) fail_msg("case %zu: d[%d] %g on the GPU, %g on the CPU", c, k, dg[k], d[k]);
        assert_close(grec, rec, (size_t)rows * HEAD_RECORD, TOL, "fused head: records");
        gpu.backward(&gpu, &L, gW, gx, grec, gdx, NULL, B);
        gpu.backward(&gpu, &L, gW, gx, grec, NULL, gdW, B);
        assert_close(gdx, dx, (size_t)rows * C, TOL, "fused head: dx");
        assert_close(gdW, dW, n, TOL, "fused head: dW");
        check_head_tangents(&L, W, gW, x, gx, xdot, gxdot, labels, glabels, B, K, c);
        void *dev[] = {gW, gWdot, gx, gxdot, grec, gdx, gdW, glabels};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu.free(&gpu, dev[i]);
        fg_free(W), fg_free(Wdot), fg_free(x), fg_free(xdot), fg_free(labels), fg_free(rec), fg_free(dx), fg_free(dW);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_head),
        cmocka_unit_test(test_sequence_layers),
        cmocka_unit_test(test_whole_gpt),
        cmocka_unit_test(test_precisions),
        cmocka_unit_test(test_fused_bias),
        cmocka_unit_test(test_attention_tensor_cores),
    };
    return run_gpu_tests("test_cuda_gpt", tests, sizeof tests / sizeof tests[0]);
}
