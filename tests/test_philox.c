// The tangent generator: Philox known answers, reproducibility, order independence, moments.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "common.h"
#include "philox.h"
#include "tangent.h"

// Known-answer vectors of Random123 (kat_vectors, philox4x32 10).
static void test_philox_known_answers(void **state) {
    (void)state;
    struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        Philox4 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        Philox4 r = philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        for (int j = 0; j < 4; j++) assert_int_equal(r.v[j], kat[i].out[j]);
    }
}

// Our log and sin/cos replace libm's for portability; they must still be accurate.
static void test_math_accuracy(void **state) {
    (void)state;
    double worst_log = 0, worst_trig = 0;
    for (int i = 1; i <= 1 << 16; i++) {
        float u = (float)i / (1 << 16);
        worst_log = fmax(worst_log, fabs(fg_log_unit(u) - log((double)u)));
        float c, s;
        float v = (float)(i - 1) / (1 << 16);
        fg_sincos_turn(v, &c, &s);
        worst_trig = fmax(worst_trig, fabs(c - cos(2 * M_PI * v)));
        worst_trig = fmax(worst_trig, fabs(s - sin(2 * M_PI * v)));
    }
    assert_true(worst_log < 2e-6);
    assert_true(worst_trig < 1e-6);
    // The smallest uniform Box-Muller sees: 2^-24.
    assert_true(fabs(fg_log_unit(1.0f / 16777216.0f) - log(1.0 / 16777216.0)) < 1e-5);
}

static void test_reproducible_and_order_independent(void **state) {
    (void)state;
    enum { N = 200003 };  // odd length: exercises partial blocks and groups
    float *a = fg_alloc_floats(N), *b = fg_alloc_floats(N);
    TangentKey key = {.seed = 7, .step = 3, .microbatch = 2, .layer = 5, .k = 1};
    tangent_fill(key, 0, N, a);
    tangent_fill(key, 0, N, b);
    assert_memory_equal(a, b, N * sizeof(float));
    // Any sub-range, generated alone, in reverse order of ranges, equals the slice.
    size_t cuts[] = {N, 150001, 65537, 65536, 1001, 3, 0};
    for (int i = 0; cuts[i + 1] || i == 0; i++) {
        size_t lo = cuts[i + 1], hi = cuts[i];
        memset(b, 0, N * sizeof(float));
        tangent_fill(key, lo, hi - lo, b);
        assert_memory_equal(a + lo, b, (hi - lo) * sizeof(float));
        if (!lo) break;
    }
    // axpy and dot see the same values.
    memset(b, 0, N * sizeof(float));
    tangent_axpy(key, 0, N, 2.0f, b);
    for (size_t i = 0; i < N; i++) assert_true(b[i] == 2.0f * a[i]);
    // axpy_rows: row r scaled by its own coefficient, rows not aligned to the batches.
    float *coeff = fg_alloc_floats(N);
    for (size_t width = 1; width <= 1000; width = width * 7 + 3) {
        size_t rows = N / width;
        for (size_t r = 0; r < rows; r++) coeff[r] = 0.5f + (float)r * 0.25f;
        for (size_t i = 0; i < N; i++) b[i] = (float)i;
        tangent_axpy_rows(key, rows, width, coeff, b);
        for (size_t i = 0; i < rows * width; i++) assert_true(b[i] == (float)i + coeff[i / width] * a[i]);
    }
    fg_free(coeff);
    double dot = tangent_dot(key, 0, N, a), sq = 0;
    for (size_t i = 0; i < N; i++) sq += (double)a[i] * a[i];
    assert_true(fabs(dot - sq) <= 1e-9 * sq);
    // Every key field changes the stream.
    TangentKey other[] = {key, key, key, key, key, key};
    other[0].seed++, other[1].step++, other[2].microbatch++, other[3].layer++, other[4].k++,
        other[5].stream++;
    for (int i = 0; i < 6; i++) {
        tangent_fill(other[i], 0, 64, b);
        assert_memory_not_equal(a, b, 64 * sizeof(float));
    }
    fg_free(a);
    fg_free(b);
}

// One element straight from the layout (tangent.c's comment), one Philox call per value: the
// plain reference the batched SIMD paths must match bit for bit.
static float reference_normal(TangentKey key, uint64_t i) {
    uint64_t batch = i / 256, r = i % 256;
    Philox4 ctr = {{(uint32_t)(batch * 64 + r % 64), (key.layer << 12) ^ key.k, key.microbatch,
                    key.step}};
    Philox4 w = philox4x32_10(ctr, key.seed, key.stream);
    unsigned out = (unsigned)(r / 64), pair = out / 2 * 2;
    float z[2];
    fg_box_muller(w.v[pair], w.v[pair + 1], &z[0], &z[1]);
    return z[out % 2];
}

// Several keys (extreme fields too), ranges that start and end mid-batch, cross groups, and sit
// where the 32-bit block number wraps (element 2^34).
static void test_matches_scalar_reference(void **state) {
    (void)state;
    const TangentKey keys[] = {
        {.seed = 7, .step = 3, .microbatch = 2, .layer = 5, .k = 1},
        {.seed = 0, .stream = STREAM_ACTIVITY},
        {.seed = ~0u, .stream = ~0u, .step = ~0u, .microbatch = ~0u, .layer = ~0u, .k = ~0u},
        {.seed = 0x9E3779B9u, .stream = 2, .step = 123456, .microbatch = 77, .layer = 1u << 20,
         .k = 4095},
    };
    const uint64_t firsts[] = {0, 1, 63, 64, 200, 255, 256, 257, 65500, 65536 + 129,
                               ((uint64_t)1 << 34) - 300};
    const size_t lens[] = {1, 3, 64, 255, 256, 257, 1000, 70000};
    enum { MAX_LEN = 70000 };
    float *a = fg_alloc_floats(MAX_LEN), *b = fg_alloc_floats(MAX_LEN);
    for (size_t ki = 0; ki < sizeof keys / sizeof keys[0]; ki++)
        for (size_t fi = 0; fi < sizeof firsts / sizeof firsts[0]; fi++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                size_t first = (size_t)firsts[fi], n = lens[li];
                tangent_fill(keys[ki], first, n, a);
                for (size_t i = 0; i < n; i++) b[i] = -0.0f;  // -0 + v is v, even for v = -0
                tangent_axpy(keys[ki], first, n, 1.0f, b);
                for (size_t i = 0; i < n; i++) {
                    uint32_t want = fg_float_to_bits(reference_normal(keys[ki], first + i));
                    assert_int_equal(fg_float_to_bits(a[i]), want);
                    assert_int_equal(fg_float_to_bits(b[i]), want);
                }
            }
    fg_free(a);
    fg_free(b);
}

// Mean, variance, skew, kurtosis and tail mass of 4M samples against N(0,1), with bounds of
// about 5 standard errors: a wrong transform fails them, a correct one passes them reliably.
static void test_normal_moments(void **state) {
    (void)state;
    enum { N = 1 << 22 };
    float *v = fg_alloc_floats(N);
    TangentKey key = {.seed = 12345, .layer = 1};
    tangent_fill(key, 0, N, v);
    double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
    long tail = 0;
    for (size_t i = 0; i < N; i++) {
        double x = v[i];
        m1 += x, m2 += x * x, m3 += x * x * x, m4 += x * x * x * x;
        tail += fabs(x) > 2.0;
    }
    m1 /= N, m2 /= N, m3 /= N, m4 /= N;
    double se = 1.0 / sqrt((double)N);
    assert_true(fabs(m1) < 5 * se);
    assert_true(fabs(m2 - 1.0) < 5 * sqrt(2.0) * se);
    assert_true(fabs(m3) < 5 * sqrt(15.0) * se);
    assert_true(fabs(m4 - 3.0) < 5 * sqrt(96.0) * se);
    double p_tail = 0.0455003, frac = (double)tail / N;
    assert_true(fabs(frac - p_tail) < 5 * sqrt(p_tail * (1 - p_tail)) * se);
    // Neighbouring elements (same Philox block, Box-Muller pairs) are uncorrelated.
    double c01 = 0, c12 = 0;
    for (size_t i = 0; i + 2 < N; i += 4) c01 += v[i] * v[i + 1], c12 += v[i + 1] * v[i + 2];
    assert_true(fabs(c01 / (N / 4)) < 5 * 2 * se);
    assert_true(fabs(c12 / (N / 4)) < 5 * 2 * se);
    fg_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_math_accuracy),
        cmocka_unit_test(test_reproducible_and_order_independent),
        cmocka_unit_test(test_matches_scalar_reference),
        cmocka_unit_test(test_normal_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
