// The token embedding over row blocks of its table (src/math/embedding_rows.h): blocks that
// split wte, one that holds wte's last rows and wpe's first, and wpe alone give the whole-table
// forward and backward bit for bit, with positions and without (Llama).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"
#include "embedding_rows.h"
#include "layer.h"
#include "tangent.h"

enum { B = 3, T = 5, C = 6, V = 40 };

static void fill(uint32_t layer, float *v, size_t n) {
    TangentKey key = {.seed = 11, .stream = STREAM_INIT, .layer = layer};
    for (size_t i = 0; i < n; i++) v[i] = 0;
    tangent_axpy(key, 0, n, 1.0f, v);
}

static void check(int no_positions) {
    Layer L = {.kind = LAYER_EMBEDDING, .in = T, .out = T * C, .tokens = T, .vocab = V,
               .no_positions = no_positions};
    size_t n = layer_ops(&L)->param_count(&L), rows = n / C;
    L.param_count = n;
    float *P = fg_alloc_floats(n), *dy = fg_alloc_floats((size_t)B * T * C), ids[B * T];
    float *y = fg_alloc_floats((size_t)B * T * C), *y2 = fg_alloc_floats((size_t)B * T * C);
    float *dP = fg_alloc_floats(n), *dP2 = fg_alloc_floats(n);
    fill(1, P, n), fill(2, dy, (size_t)B * T * C);
    for (int r = 0; r < B * T; r++) ids[r] = (float)((r * 17 + 3) % V);  // repeats: 15 of 40
    ids[4] = ids[9] = 38;                                                // in the last wte block
    layer_ops(&L)->forward(&L, P, ids, y, B);
    layer_ops(&L)->backward(&L, P, ids, dy, NULL, dP, B);
    const int cuts[] = {0, 16, 37, (int)rows - 2, (int)rows};  // wte | wte | wte + wpe | wpe
    for (int i = 0; i < 4; i++) {
        if (cuts[i + 1] <= cuts[i]) continue;
        size_t at = (size_t)cuts[i] * C;
        embedding_rows_forward(&L, P + at, cuts[i], cuts[i + 1] - cuts[i], ids, y2, B);
        embedding_rows_backward(&L, cuts[i], cuts[i + 1] - cuts[i], ids, dy, dP2 + at, B);
    }
    assert_memory_equal(y, y2, (size_t)B * T * C * sizeof(float));
    assert_memory_equal(dP, dP2, n * sizeof(float));
    fg_free(P), fg_free(dy), fg_free(y), fg_free(y2), fg_free(dP), fg_free(dP2);
}

static void test_positions(void **state) {
    (void)state;
    check(0);
}

static void test_no_positions(void **state) {
    (void)state;
    check(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_no_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
