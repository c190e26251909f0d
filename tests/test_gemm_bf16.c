// precision = bf16 on the CPU (gemm.h, gemm_bf16.c, bf16.h): the rounding, bit for bit in both
// loops; the BF16 product against an FP32 reference in double within bf16's bounds, for every
// transpose, leading dimension, alpha and beta; a BF16 operand passed as it is; the layers'
// JVP and VJP consistent within bf16's bounds and near their FP32 values; the refusal of a CPU
// without AVX512-BF16 (FGPIPE_CPU_NO_BF16=1); the CPU backend's BF16 ops against bf16_math.h.
// Products skip where this CPU lacks avx512_bf16.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "bf16.h"
#include "gemm.h"
#include "test_util.h"
#include "bf16_cases.h"

#define U_BF16 (1.0 / 256.0)  // bf16's unit roundoff: 8 significant bits, round to nearest

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// ---------------------------------------------------------------------------------------------
// 1. Rounding: nearest, ties to even, denormals to signed zero, NaN quiet, infinities kept.

static void test_rounding_cases(void **state) {
    (void)state;
    assert_int_equal(bf16_round(1.0f), 0x3f80);
    assert_int_equal(bf16_round(bits_f32(0x3f808000u)), 0x3f80);  // tie, even below: down
    assert_int_equal(bf16_round(bits_f32(0x3f818000u)), 0x3f82);  // tie, odd below: up
    assert_int_equal(bf16_round(bits_f32(0x3f808001u)), 0x3f81);  // above the tie: up
    assert_int_equal(bf16_round(bits_f32(0x3f807fffu)), 0x3f80);  // below the tie: down
    assert_int_equal(bf16_round(-2.5f), 0xc020);
    assert_int_equal(bf16_round(bits_f32(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
    assert_int_equal(bf16_round(bits_f32(0x7f800000u)), 0x7f80);
    assert_int_equal(bf16_round(bits_f32(0xff800000u)), 0xff80);
    assert_int_equal(bf16_round(bits_f32(0x00000001u)), 0x0000);  // denormal: zero
    assert_int_equal(bf16_round(bits_f32(0x80400000u)), 0x8000);  // negative denormal: -0
    assert_int_equal(bf16_round(bits_f32(0x7f800001u)), 0x7fc0);  // signalling NaN: quiet
    assert_true(bf16_to_f32(bf16_round(3.0f)) == 3.0f);
}

// Both loops give the same bits, on random values over every exponent and on the specials, at
// lengths around the vector's 32.
static void test_rounding_loops_agree(void **state) {
    (void)state;
    if (cpu_bf16_missing()) skip();
    enum { N = 4099 };
    float *x = fg_alloc_floats(N);
    uint16_t *a = fg_alloc_bytes(N * 2), *b = fg_alloc_bytes(N * 2);
    Rng r = {7};
    for (int i = 0; i < N; i++) x[i] = bits_f32((uint32_t)(rng_next(&r) >> 32));
    const uint32_t specials[] = {0, 0x80000000u, 1, 0x807fffffu, 0x7f800000u, 0xff800000u,
                                 0x7fc00000u, 0x7f800001u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu};
    for (int i = 0; i < (int)(sizeof specials / sizeof specials[0]); i++) x[i * 7] = bits_f32(specials[i]);
    for (int n = 0; n <= 70; n++) {
        memset(a, 0, N * 2), memset(b, 0, N * 2);
        bf16_convert_scalar(x + n, a, (size_t)(N - n - (n % 5)));
        bf16_convert_avx512(x + n, b, (size_t)(N - n - (n % 5)));
        assert_memory_equal(a, b, N * 2);
    }
    fg_free(x), fg_free(a), fg_free(b);
    // Rows, dense (shared among threads) and strided, past the parallel threshold.
    enum { R = 601, C = 500, LD = 503 };
    x = fg_alloc_floats(R * LD), a = fg_alloc_bytes(R * C * 2), b = fg_alloc_bytes(R * C * 2);
    fill_uniform(&r, x, R * LD, 3.0f);
    for (int ld = C; ld <= LD; ld += LD - C) {
        bf16_convert_rows(bf16_convert_avx512, x, R, C, ld, a);
        for (int i = 0; i < R; i++) bf16_convert_scalar(x + (size_t)i * ld, b + (size_t)i * C, C);
        assert_memory_equal(a, b, R * C * 2);
    }
    fg_free(x), fg_free(a), fg_free(b);
}

// ---------------------------------------------------------------------------------------------
// 2. The product against FP32 operands multiplied in double.

typedef struct {
    int m, n, k, ta, tb, pad_a, pad_b, pad_c;  // pad: extra elements per stored row
    float alpha, beta;
} ProductCase;

// ref [m, n] = alpha op(A) op(B) + beta C0 in double; abs_ref = |alpha| |op(A)| |op(B)|.
static void reference(const ProductCase *p, const float *A, int lda, const float *B, int ldb,
                      const float *C0, int ldc, double *ref, double *abs_ref) {
    for (int i = 0; i < p->m; i++)
        for (int j = 0; j < p->n; j++) {
            double s = 0.0, a = 0.0;
            for (int q = 0; q < p->k; q++) {
                double x = p->ta ? A[(size_t)q * lda + i] : A[(size_t)i * lda + q];
                double y = p->tb ? B[(size_t)j * ldb + q] : B[(size_t)q * ldb + j];
                s += x * y, a += fabs(x * y);
            }
            double c0 = p->beta == 0.0f ? 0.0 : p->beta * (double)C0[(size_t)i * ldc + j];
            ref[(size_t)i * p->n + j] = p->alpha * s + c0;
            abs_ref[(size_t)i * p->n + j] = fabs(p->alpha) * a + fabs(c0);
        }
}

// Every element within the worst case, 2u sum |a b| (each input rounded once: (1 + d1)(1 + d2))
// plus FP32 accumulation; the largest error within a few standard deviations of the random-
// sign sum, 2u sqrt(k) max|a| max|b| (operands uniform in [-1, 1)), and not 0 when k > 8 (the
// product did run in bf16). Returns the largest error over u sqrt(k).
static double check_product(const Gemm *g, const ProductCase *p, Rng *r) {
    int ra = p->ta ? p->k : p->m, ca = p->ta ? p->m : p->k, rb = p->tb ? p->n : p->k;
    int cb = p->tb ? p->k : p->n, lda = ca + p->pad_a, ldb = cb + p->pad_b, ldc = p->n + p->pad_c;
    float *A = fg_alloc_floats((size_t)ra * lda), *B = fg_alloc_floats((size_t)rb * ldb);
    float *C = fg_alloc_floats((size_t)p->m * ldc), *C0 = fg_alloc_floats((size_t)p->m * ldc);
    double *ref = malloc(sizeof(double) * p->m * p->n), *abs_ref = malloc(sizeof(double) * p->m * p->n);
    fill_uniform(r, A, (size_t)ra * lda, 1.0f);
    fill_uniform(r, B, (size_t)rb * ldb, 1.0f);
    fill_uniform(r, C0, (size_t)p->m * ldc, 1.0f);
    if (p->beta == 0.0f) C0[0] = NAN;  // beta 0 ignores C, NaN or not
    memcpy(C, C0, sizeof(float) * p->m * ldc);
    g->run(g, p->m, p->n, p->k, p->alpha, gemm_f32(A, lda, p->ta), gemm_f32(B, ldb, p->tb), p->beta,
           C, ldc);
    reference(p, A, lda, B, ldb, C0, ldc, ref, abs_ref);
    double worst = 0.0, typical = 2.0 * U_BF16 * sqrt((double)p->k) * fabs(p->alpha);
    for (int i = 0; i < p->m; i++) {
        for (int j = 0; j < p->n; j++) {
            double e = fabs(C[(size_t)i * ldc + j] - ref[(size_t)i * p->n + j]);
            double bound = 2.0 * U_BF16 * abs_ref[(size_t)i * p->n + j] * (1.0 + 1e-3) + 1e-6 * (p->k + 1);
            if (!(e <= bound))
                fail_msg("m %d n %d k %d trans %d %d pads %d %d %d alpha %g beta %g: C[%d,%d] = %.9g, "
                         "reference %.9g, error %.3g > %.3g", p->m, p->n, p->k, p->ta, p->tb, p->pad_a,
                         p->pad_b, p->pad_c, p->alpha, p->beta, i, j, C[(size_t)i * ldc + j],
                         ref[(size_t)i * p->n + j], e, bound);
            worst = FG_MAX(worst, e);
        }
        for (int j = p->n; j < ldc; j++)  // the padding between C's rows is left alone
            assert_true(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
    }
    if (!(worst <= typical + 1e-6)) fail_msg("k %d: largest error %.3g above 2u sqrt(k) |alpha| = %.3g", p->k, worst, typical);
    if (p->k > 8 && p->alpha != 0.0f) assert_true(worst > 0.0);
    fg_free(A), fg_free(B), fg_free(C), fg_free(C0), free(ref), free(abs_ref);
    return worst / (U_BF16 * sqrt((double)p->k));
}

static void test_product_against_fp32(void **state) {
    (void)state;
    if (cpu_bf16_missing()) skip();
    Gemm g;
    FgError err = {0};
    assert_int_equal(gemm_bf16_create(&g, &err), FG_OK);
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 64}, {64, 96, 768}, {130, 70, 300}};
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}};
    Rng r = {11};
    double worst = 0.0;
    for (int s = 0; s < 5; s++)
        for (int t = 0; t < 4; t++)
            for (int pad = 0; pad < 2; pad++)
                for (int v = 0; v < 3; v++) {
                    ProductCase p = {shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1,
                                     pad * 3, pad * 5, pad * (s + 1), ab[v][0], ab[v][1]};
                    worst = FG_MAX(worst, check_product(&g, &p, &r));
                }
    print_message("bf16 product: largest error %.2f u sqrt(k)\n", worst);
    // k = 0 is C = beta C; m or n = 0 touches nothing.
    float C[4] = {1, 2, 3, 4};
    g.run(&g, 2, 2, 0, 1.0f, gemm_f32(C, 2, 0), gemm_f32(C, 2, 0), 0.5f, C, 2);
    assert_true(C[0] == 0.5f && C[3] == 2.0f);
    g.run(&g, 0, 2, 3, 1.0f, gemm_f32(NULL, 3, 0), gemm_f32(NULL, 2, 0), 0.0f, C, 2);
    assert_true(C[0] == 0.5f);
    gemm_bf16_destroy(&g);
}

// A BF16 operand passed as it is gives the bits its FP32 original gives, and the same call twice
// (its primitive cached) the same bits.
static void test_bf16_operand_and_repeat(void **state) {
    (void)state;
    if (cpu_bf16_missing()) skip();
    Gemm g;
    FgError err = {0};
    assert_int_equal(gemm_bf16_create(&g, &err), FG_OK);
    enum { M = 48, N = 40, K = 72 };
    float *A = fg_alloc_floats(K * M), *B = fg_alloc_floats(N * K), *C[3];
    uint16_t *A16 = fg_alloc_bytes(K * M * 2);
    Rng r = {3};
    fill_uniform(&r, A, K * M, 1.0f), fill_uniform(&r, B, N * K, 1.0f);
    bf16_convert_scalar(A, A16, K * M);
    for (int i = 0; i < 3; i++) C[i] = fg_alloc_floats(M * N);
    g.run(&g, M, N, K, 1.0f, gemm_f32(A, M, 1), gemm_f32(B, K, 1), 0.0f, C[0], N);
    g.run(&g, M, N, K, 1.0f, gemm_f32(A, M, 1), gemm_f32(B, K, 1), 0.0f, C[1], N);
    g.run(&g, M, N, K, 1.0f, (GemmOperand){A16, M, 1, FG_BF16}, gemm_f32(B, K, 1), 0.0f, C[2], N);
    assert_memory_equal(C[0], C[1], sizeof(float) * M * N);
    assert_memory_equal(C[0], C[2], sizeof(float) * M * N);
    for (int i = 0; i < 3; i++) fg_free(C[i]);
    fg_free(A), fg_free(B), fg_free(A16);
    gemm_bf16_destroy(&g);
}

// ---------------------------------------------------------------------------------------------
// 3. The layers with GEMMs through a bf16 backend.

typedef struct {
    Layer L;
    int B, K;
} LayerCase;

static const LayerCase LAYER_CASES[] = {
    {{.kind = LAYER_LINEAR, .in = 96, .out = 80}, 9, 2},
    {{.kind = LAYER_LINEAR, .in = 8 + 64, .out = 8 + 48, .tokens = 5, .carry = 8}, 2, 2},
    {{.kind = LAYER_LINEAR, .in = 32 + 128, .out = 32, .tokens = 4, .carry = 32, .residual = 1}, 3, 1},
    {{.kind = LAYER_LINEAR, .in = 64, .out = 100, .tokens = 3, .no_bias = 1}, 2, 2},
    {{.kind = LAYER_LORA, .in = 4 + 48, .out = 4 + 48 + 24 + 24 + 24, .tokens = 3, .carry = 4,
      .lora_rank = 8, .lora_scale = 0.5f, .lora_parts = {24, 24, 24}, .lora_mask = 5}, 2, 2},
};

// <u, J v> = <J^T u, v> within bf16's bounds (each side rounds other operands, so they agree to
// about u over the magnitudes involved), and y, ydot, dx, dp within 4u sqrt(width) of FP32's in
// norm.
static void check_layer(const Backend *bf, const LayerCase *lc, uint64_t seed) {
    Layer L = lc->L;
    int T = layer_tokens(&L), B = lc->B, K = lc->K;
    L.in *= T, L.out *= T;
    L.param_count = layer_ops(&L)->param_count(&L);
    size_t nx = (size_t)B * L.in, ny = (size_t)B * L.out, np = L.param_count;
    float *x = fg_alloc_floats(nx), *xd = fg_alloc_floats(K * nx), *p = fg_alloc_floats(np);
    float *pd = fg_alloc_floats(K * np), *u = fg_alloc_floats(ny);
    float *y[2], *yd[2], *dx[2], *dp[2];
    Rng r = {seed};
    fill_uniform(&r, x, nx, 1.0f), fill_uniform(&r, xd, K * nx, 1.0f), fill_uniform(&r, p, np, 0.2f);
    fill_uniform(&r, pd, K * np, 1.0f), fill_uniform(&r, u, ny, 1.0f);
    for (int b = 0; b < 2; b++) {  // 0: backend_cpu (FP32), 1: bf16
        const Backend *be = b ? bf : &backend_cpu;
        y[b] = fg_alloc_floats(ny), yd[b] = fg_alloc_floats(K * ny);
        dx[b] = fg_alloc_floats(nx), dp[b] = fg_alloc_floats(np);
        be->jvp(be, &L, p, pd, x, xd, y[b], yd[b], B, K);
        be->backward(be, &L, p, x, u, dx[b], dp[b], B);
    }
    double tol = 4.0 * U_BF16 * sqrt((double)(L.in / T));
    for (int k = 0; k < K; k++) {
        const float *ydk = yd[1] + k * ny, *xdk = xd + k * nx, *pdk = pd + k * np;
        double lhs = dot(u, ydk, ny), rhs = dot(dx[1], xdk, nx) + dot(dp[1], pdk, np);
        double scale = norm(u, ny) * norm(ydk, ny) + norm(dx[1], nx) * norm(xdk, nx) +
                       norm(dp[1], np) * norm(pdk, np);
        if (!(fabs(lhs - rhs) <= 4.0 * U_BF16 * scale))
            fail_msg("%s in %d out %d k %d: <u, J v> = %.9g, <J^T u, v> = %.9g (scale %.3g)",
                     L.kind == LAYER_LORA ? "lora" : "linear", L.in, L.out, k, lhs, rhs, scale);
    }
    const float *got[] = {y[1], yd[1], dx[1], dp[1]}, *want[] = {y[0], yd[0], dx[0], dp[0]};
    size_t n[] = {ny, K * ny, nx, np};
    for (int i = 0; i < 4; i++) {
        double e = sqrt(dist2(got[i], want[i], n[i])), w = norm(want[i], n[i]);
        if (!(e <= tol * w + 1e-6))
            fail_msg("in %d out %d: output %d (y, ydot, dx, dp) %.3g from FP32's, more than %.3g of %.3g",
                     L.in, L.out, i, e, tol, w);
        if (i == 0 && w > 0) assert_true(e > 0.0);  // the bf16 backend rounded
    }
    for (int b = 0; b < 2; b++) fg_free(y[b]), fg_free(yd[b]), fg_free(dx[b]), fg_free(dp[b]);
    fg_free(x), fg_free(xd), fg_free(p), fg_free(pd), fg_free(u);
}

static void test_layers_in_bf16(void **state) {
    (void)state;
    if (cpu_bf16_missing()) skip();
    Backend bf;
    FgError err = {0};
    assert_int_equal(backend_cpu_create(PRECISION_BF16, &bf, &err), FG_OK);
    int n = (int)(sizeof LAYER_CASES / sizeof LAYER_CASES[0]);
    for (int i = 0; i < n; i++) check_layer(&bf, &LAYER_CASES[i], 100u + (uint64_t)i);
    backend_cpu_destroy(&bf);
}

// The CPU backend's BF16 ops (narrow16, widen16, round16: the stage's activations and the
// weights' copy go through them) give bf16_math.h's bits: backend_cpu's scalar loop always, a
// bf16 backend's vector loop where the CPU has it; lengths past the vector's 32 and past the
// 256 Ki values from which narrow16 runs in parallel.
static void test_backend_bf16_ops(void **state) {
    (void)state;
    const size_t lengths[] = {1, BF16_N_EDGES, 4099, (1u << 18) + 37};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        float *x = bf16_case_floats(lengths[i] < BF16_N_EDGES ? BF16_N_EDGES : lengths[i], 11 + i);
        if (lengths[i] == 1) x[0] = bf16_case_float(0x7fc00000u);  // one value, not finite
        check_backend_bf16(&backend_cpu, x, lengths[i], "backend_cpu");
        Backend bf;
        FgError err = {0};
        if (!cpu_bf16_missing()) {
            assert_int_equal(backend_cpu_create(PRECISION_BF16, &bf, &err), FG_OK);
            check_backend_bf16(&bf, x, lengths[i], "backend_cpu_create(bf16)");
            backend_cpu_destroy(&bf);
        }
        fg_free(x);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. A CPU without AVX512-BF16 (simulated) is refused by name; tf32 is refused on the CPU.

static void test_refusals(void **state) {
    (void)state;
    Backend be;
    FgError err = {0};
    setenv("FGPIPE_CPU_NO_BF16", "1", 1);
    assert_non_null(cpu_bf16_missing());
    assert_int_equal(backend_cpu_create(PRECISION_BF16, &be, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "precision = bf16"));
    assert_non_null(strstr(err.msg, "avx512_bf16"));
    unsetenv("FGPIPE_CPU_NO_BF16");
    assert_int_equal(backend_cpu_create(PRECISION_TF32, &be, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "precision = tf32 needs device = cuda"));
    assert_int_equal(backend_cpu_create(PRECISION_FP32, &be, &err), FG_OK);
    backend_cpu_destroy(&be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding_cases),
        cmocka_unit_test(test_rounding_loops_agree),
        cmocka_unit_test(test_product_against_fp32),
        cmocka_unit_test(test_bf16_operand_and_repeat),
        cmocka_unit_test(test_layers_in_bf16),
        cmocka_unit_test(test_backend_bf16_ops),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
