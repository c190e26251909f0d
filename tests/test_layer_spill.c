// The spill file (io/layer_spill.c): regions of any size, pieces of any length written and read
// back bit for bit, a piece that ends inside a block leaving the rest of it, errors by name.
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "layer_spill.h"
#include "test_util.h"

static char g_dir[1024];  // on the real disk: the O_DIRECT path

static int setup_dir(void **state) {
    (void)state;
    return scratch_dir(g_dir, sizeof g_dir, "./spill") ? -1 : 0;
}

static int teardown_dir(void **state) {
    (void)state;
    return remove_tree(g_dir) ? -1 : 0;
}

static void fill(float *v, size_t n, uint32_t tag) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)(i * 2654435761u) ^ tag;
        memcpy(&v[i], &x, sizeof x);
    }
}

// Two regions of unaligned sizes: whole writes, then pieces (one of them longer than the
// bounce buffer, one ending mid-block), read back whole and in pieces.
static void test_roundtrip(void **state) {
    (void)state;
    size_t floats[2] = {3 * 1024 * 1024 + 777, 5000};
    LayerSpill sp;
    FgError err = {0};
    assert_int_equal(layer_spill_open(g_dir, "t", 2, floats, &sp, &err), FG_OK);
    float *a = malloc(floats[0] * sizeof(float)), *b = malloc(floats[0] * sizeof(float));
    fill(a, floats[0], 1);
    assert_int_equal(sp.write(&sp, 0, 0, a, floats[0], &err), FG_OK);
    fill(b, floats[1], 2);
    assert_int_equal(sp.write(&sp, 1, 0, b, floats[1], &err), FG_OK);
    // A piece inside region 0 that ends mid-block: the floats after it stay.
    float *piece = malloc(3000 * sizeof(float));
    fill(piece, 3000, 3);
    assert_int_equal(sp.write(&sp, 0, 2 * SPILL_ALIGN_FLOATS, piece, 3000, &err), FG_OK);
    memcpy(a + 2 * SPILL_ALIGN_FLOATS, piece, 3000 * sizeof(float));
    float *back = malloc(floats[0] * sizeof(float));
    assert_int_equal(sp.read(&sp, 0, 0, back, floats[0], &err), FG_OK);
    assert_memory_equal(back, a, floats[0] * sizeof(float));
    assert_int_equal(sp.read(&sp, 1, 0, back, floats[1], &err), FG_OK);
    assert_memory_equal(back, b, floats[1] * sizeof(float));
    // In pieces of 1 M floats + the tail, as the tied sum reads them.
    for (size_t o = 0; o < floats[0]; o += 1 << 20) {
        size_t k = floats[0] - o < (1u << 20) ? floats[0] - o : 1u << 20;
        assert_int_equal(sp.read(&sp, 0, o, back, k, &err), FG_OK);
        assert_memory_equal(back, a + o, k * sizeof(float));
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/t.spill", g_dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    sp.close(&sp);
    assert_int_not_equal(stat(path, &st), 0);  // removed at close
    free(a), free(b), free(piece), free(back);
}

// A piece outside its region or not starting on SPILL_ALIGN_FLOATS, and a directory that is
// not there, are errors that name the file.
static void test_errors(void **state) {
    (void)state;
    size_t floats[1] = {4096};
    LayerSpill sp;
    FgError err = {0};
    float v[8] = {0};
    assert_int_equal(layer_spill_open(g_dir, "e", 1, floats, &sp, &err), FG_OK);
    assert_int_not_equal(sp.write(&sp, 0, 4096, v, 8, &err), FG_OK);
    assert_non_null(strstr(err.msg, "e.spill"));
    assert_int_not_equal(sp.read(&sp, 0, 5, v, 8, &err), FG_OK);
    assert_int_not_equal(sp.read(&sp, 1, 0, v, 8, &err), FG_OK);
    sp.close(&sp);
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/not-there", g_dir);
    assert_int_not_equal(layer_spill_open(missing, "e", 1, floats, &sp, &err), FG_OK);
    assert_non_null(strstr(err.msg, "not-there"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_errors, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
