// The elementwise math the layers' vectorized loops call (activation_math.h): fg_tanh against
// double tanh over a sweep of every float range it has a branch for, odd, the same bits in a
// vectorized loop as in a scalar call, and what it gives non-finite inputs.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "activation_math.h"
#include "common.h"

// A scalar call the compiler cannot fold into a caller's vector loop.
static float (*volatile scalar_tanh)(float) = fg_tanh;

static float ulp_of(float y) {
    float a = fabsf(y);
    return nextafterf(a, INFINITY) - a;
}

// Every 61st float of [0, 10) (tanh rounds to 1 above 9.01, where fg_tanh clamps at 10; both branches and the switch
// between them at 0.625 included), then the same in a loop the compiler vectorizes.
static void test_tanh_accuracy_and_vector_bits(void **state) {
    (void)state;
    enum { N = 1 << 16, STRIDE = 61 };
    float *x = fg_alloc_floats(N), *y = fg_alloc_floats(N);
    double worst = 0.0;
    for (uint32_t base = 0; base < 0x41200000u; base += (uint32_t)N * STRIDE) {
        int n = 0;
        for (uint32_t u = base; n < N && u < 0x41200000u; u += STRIDE) memcpy(&x[n++], &u, 4);
#pragma omp simd
        for (int i = 0; i < n; i++) y[i] = fg_tanh(x[i]);
        for (int i = 0; i < n; i++) {
            float s = scalar_tanh(x[i]);
            assert_memory_equal(&s, &y[i], sizeof s);  // vector lanes = scalar, bit for bit
            assert_true(scalar_tanh(-x[i]) == -s);    // odd
            double exact = tanh((double)x[i]), err = fabs((double)s - exact) / ulp_of((float)exact);
            worst = err > worst ? err : worst;
        }
    }
    print_message("fg_tanh: at most %.3f ulp from tanh over the sweep\n", worst);
    assert_true(worst <= 1.5);
    fg_free(x);
    fg_free(y);
}

static void test_tanh_special_values(void **state) {
    (void)state;
    assert_true(isnan(scalar_tanh(NAN)));
    assert_true(scalar_tanh(INFINITY) == 1.0f && scalar_tanh(-INFINITY) == -1.0f);
    assert_true(scalar_tanh(1e30f) == 1.0f && scalar_tanh(-9.5f) == -1.0f && scalar_tanh(9.0f) < 1.0f);
    assert_true(scalar_tanh(0.0f) == 0.0f && scalar_tanh(1e-30f) == 1e-30f);
    assert_true(scalar_tanh(FLT_MIN) == FLT_MIN);
}

// GELU through fg_tanh against the tanh form in double: as close as with libm's tanhf (both
// 4.3e-7 at most in absolute terms over [-8, 8], 4.6e-7 relative where |gelu| >= 0.1; where
// 1 + tanh nearly cancels, an ulp of tanh is what the float formula resolves).
static void test_gelu_against_double(void **state) {
    (void)state;
    double worst_abs = 0.0, worst_rel = 0.0;
    for (float x = -8.0f; x <= 8.0f; x += 1.0f / 1024) {
        double xd = x, u = 0.7978845608 * (xd + 0.044715 * xd * xd * xd);
        double exact = 0.5 * xd * (1.0 + tanh(u)), err = fabs((double)fg_gelu(x) - exact);
        worst_abs = fmax(worst_abs, err);
        if (fabs(exact) >= 0.1) worst_rel = fmax(worst_rel, err / fabs(exact));
    }
    print_message("fg_gelu: at most %.3g absolute, %.3g relative where |gelu| >= 0.1\n", worst_abs, worst_rel);
    assert_true(worst_abs < 5e-7);
    assert_true(worst_rel < 6e-7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tanh_accuracy_and_vector_bits),
        cmocka_unit_test(test_tanh_special_values),
        cmocka_unit_test(test_gelu_against_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
