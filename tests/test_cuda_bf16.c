// BF16 numbers on the CUDA backend (cuda/bf16_cuda.cu, gemm_cuda.cu; docs/gpu.md, "precision"):
// - narrow16 (denormals flushed or kept, as weights or not), widen16 (every BF16 pattern) and round16 (its count
//   of values not finite kept in device memory and added over calls) give the CPU's bits,
//   bf16_math.h's, on edge values (denormals, ties, the largest finite, infinities, signalling
//   and quiet NaNs) and random bit patterns, at lengths up to past the kernels' grid cap;
// - a BF16 GEMM reads a layer's weights' BF16 copy (Layer.params16) where it lies: a linear
//   layer (forward, the jvp's input tangents, the backward's dx) and the fused head given W and
//   the copy of 2 W compute what 2 W gives without a copy (rounded per call by the same
//   formula), not what W gives; in fp32 the copy is ignored (the same bits as without it).
// Without a GPU it exits 77 (skipped).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpu_test_util.h"
#include "bf16_cases.h"
#include "head_loss.h"

static void test_bf16_ops_match_cpu(void **state) {
    (void)state;
    const size_t lengths[] = {1, BF16_N_EDGES, 4099, (size_t)65535 * 256 + 1000};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        float *x = bf16_case_floats(lengths[i] < BF16_N_EDGES ? BF16_N_EDGES : lengths[i], 21 + i);
        if (lengths[i] == 1) x[0] = bf16_case_float(0x7f800001u);  // one value, a signalling NaN
        check_backend_bf16(&gpu, x, lengths[i], "cuda");
        check_backend_bf16(cpu, x, lengths[i], "cpu");  // the reference the GPU was held to
        fg_free(x);
    }
}

// n random floats on the GPU.
static float *random_on_gpu(size_t n, uint64_t seed) {
    float *host = random_floats(n, seed), *d = on_gpu(host, n);
    fg_free(host);
    return d;
}

// The device BF16 copy of n host floats times `scale` (exact: a power of two).
static uint16_t *copy16_of(const float *host, size_t n, float scale) {
    float *scaled = fg_alloc_floats(n);
    for (size_t i = 0; i < n; i++) scaled[i] = scale * host[i];
    float *d = on_gpu(scaled, n);
    uint16_t *d16 = gpu.alloc(&gpu, n * sizeof(uint16_t));
    gpu.narrow16(&gpu, d, d16, n, BF16_WEIGHTS);
    gpu.free(&gpu, d);
    fg_free(scaled);
    return d16;
}

static void expect_same(const float *a, const float *b, size_t n, double tol, const char *what) {
    float *ha = from_gpu(a, n), *hb = from_gpu(b, n);
    double e = rel_error(ha, hb, n);
    fg_free(ha), fg_free(hb);
    if (!(e <= tol)) fail_msg("%s: differ by %.3g (relative), tolerance %.1g", what, e, tol);
}

static void expect_apart(const float *a, const float *b, size_t n, const char *what) {
    float *ha = from_gpu(a, n), *hb = from_gpu(b, n);
    double e = rel_error(ha, hb, n);
    fg_free(ha), fg_free(hb);
    if (!(e > 0.1)) fail_msg("%s: only %.3g apart: the copy was not read", what, e);
}

// A linear layer without bias, x [B, in], W and 2 W: with W's buffer and the copy of 2 W, the
// GEMMs must compute 2 W's products (in bf16), not W's; in fp32 the copy must change nothing.
static void test_linear_reads_weights_copy(void **state) {
    (void)state;
    enum { B = 16, IN = 96, OUT = 40, K = 2 };
    FgError err = {0};
    Layer L = {.kind = LAYER_LINEAR, .in = IN, .out = OUT, .no_bias = 1};
    snprintf(L.name, sizeof L.name, "linear");
    L.param_count = layer_ops(&L)->param_count(&L);
    size_t np = L.param_count, nx = (size_t)B * IN, ny = (size_t)B * OUT;
    float *W = random_floats(np, 31), *W2 = fg_alloc_floats(np);
    for (size_t i = 0; i < np; i++) W2[i] = 2.0f * W[i];
    float *gW = on_gpu(W, np), *gW2 = on_gpu(W2, np), *gx = random_on_gpu(nx, 32);
    float *gxd = random_on_gpu(K * nx, 33), *gdy = random_on_gpu(ny, 34);
    uint16_t *g16 = copy16_of(W, np, 2.0f);
    Layer Lc = layer_with_weights16(&L, g16);
    float *y[3], *yd[3], *dx[3];
    for (int i = 0; i < 3; i++)
        y[i] = backend_alloc_floats(&gpu, ny), yd[i] = backend_alloc_floats(&gpu, K * ny),
        dx[i] = backend_alloc_floats(&gpu, nx);
    const int precisions[] = {PRECISION_FP32, PRECISION_BF16};
    for (int pi = 0; pi < 2; pi++) {
        const int precision = precisions[pi];
        assert_int_equal(backend_cuda_set_precision(&gpu, precision, &err), FG_OK);
        // [0]: W with the copy of 2 W; [1]: 2 W, no copy; [2]: W, no copy.
        const Layer *layer[3] = {&Lc, &L, &L};
        const float *p[3] = {gW, gW2, gW};
        for (int i = 0; i < 3; i++) {
            gpu.jvp(&gpu, layer[i], p[i], NULL, gx, gxd, y[i], yd[i], B, K);
            gpu.backward(&gpu, layer[i], p[i], gx, gdy, dx[i], NULL, B);
        }
        const float *got[3] = {y[0], yd[0], dx[0]}, *as2[3] = {y[1], yd[1], dx[1]}, *as1[3] = {y[2], yd[2], dx[2]};
        const size_t n[3] = {ny, K * ny, nx};
        const char *what[3] = {"forward", "jvp's input tangents", "backward's dx"};
        for (int j = 0; j < 3; j++) {
            char label[96];
            snprintf(label, sizeof label, "linear %s, %s", what[j], precision == PRECISION_BF16 ? "bf16" : "fp32");
            if (precision == PRECISION_BF16) {
                expect_same(got[j], as2[j], n[j], 1e-6, label);
                expect_apart(got[j], as1[j], n[j], label);
            } else {
                expect_same(got[j], as1[j], n[j], 0.0, label);  // fp32: the copy is not read
            }
        }
    }
    assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_FP32, &err), FG_OK);
    void *dev[] = {gW, gW2, gx, gxd, gdy, g16, y[0], y[1], y[2], yd[0], yd[1], yd[2], dx[0], dx[1], dx[2]};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu.free(&gpu, dev[i]);
    fg_free(W), fg_free(W2);
}

// The fused head in bf16, one block and several: W with the copy of 2 W scores (the loss, and
// dx of its backward) as 2 W does.
static void test_head_reads_weights_copy(void **state) {
    (void)state;
    int cases[][3] = {{256, 4096, 2}, {300, 64, 3}};  // vocab, block, B
    FgError err = {0};
    assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_BF16, &err), FG_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int V = cases[c][0], B = cases[c][2], C = 16, T = 5, rows = B * T;
        Layer L = {.kind = LAYER_HEAD_LOSS, .in = T * C, .out = T * HEAD_RECORD, .tokens = T,
                   .no_bias = 1, .vocab = V, .classes = V, .head_block = cases[c][1]};
        size_t n = (size_t)V * C;
        L.param_count = n;
        float *W = random_floats(n, 41 + c), *W2 = fg_alloc_floats(n);
        for (size_t i = 0; i < n; i++) W2[i] = 2.0f * W[i];
        Label *labels = fg_alloc_bytes((size_t)rows * sizeof(Label));
        for (int r = 0; r < rows; r++) labels[r] = (Label)((r * 7919 + 13) % V);
        float *gW = on_gpu(W, n), *gW2 = on_gpu(W2, n), *gx = random_on_gpu((size_t)rows * C, 43);
        Label *glabels = gpu.alloc(&gpu, (size_t)rows * sizeof(Label));
        gpu.upload(&gpu, glabels, labels, (size_t)rows * sizeof(Label));
        uint16_t *g16 = copy16_of(W, n, 2.0f);
        Layer Lc = layer_with_weights16(&L, g16);
        float *rec = backend_alloc_floats(&gpu, (size_t)rows * HEAD_RECORD);
        float *dx[2] = {backend_alloc_floats(&gpu, (size_t)rows * C), backend_alloc_floats(&gpu, (size_t)rows * C)};
        int hits[3];
        float with_copy = gpu.head_forward(&gpu, &Lc, gW, gx, glabels, B, 1.0f, rec, &hits[0]);
        gpu.backward(&gpu, &Lc, gW, gx, rec, dx[0], NULL, B);
        float as2 = gpu.head_forward(&gpu, &L, gW2, gx, glabels, B, 1.0f, rec, &hits[1]);
        gpu.backward(&gpu, &L, gW2, gx, rec, dx[1], NULL, B);
        float as1 = gpu.head_forward(&gpu, &L, gW, gx, glabels, B, 1.0f, rec, &hits[2]);
        if (!(fabsf(with_copy - as2) <= 1e-6f * fabsf(as2)))
            fail_msg("head case %zu: loss %.9g with the copy of 2 W, %.9g with 2 W", c, with_copy, as2);
        if (!(fabsf(with_copy - as1) > 1e-3f * fabsf(as1)))
            fail_msg("head case %zu: loss %.9g with the copy of 2 W, %.9g with W: the copy was not read", c, with_copy, as1);
        expect_same(dx[0], dx[1], (size_t)rows * C, 1e-6, "fused head backward's dx, bf16");
        void *dev[] = {gW, gW2, gx, glabels, g16, rec, dx[0], dx[1]};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu.free(&gpu, dev[i]);
        fg_free(W), fg_free(W2), fg_free(labels);
    }
    assert_int_equal(backend_cuda_set_precision(&gpu, PRECISION_FP32, &err), FG_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_ops_match_cpu),
        cmocka_unit_test(test_linear_reads_weights_copy),
        cmocka_unit_test(test_head_reads_weights_copy),
    };
    return run_gpu_tests("test_cuda_bf16", tests, sizeof tests / sizeof tests[0]);
}
