// Row blocks of a layer in the store and the stream (io/layer_store_blocks.c,
// docs/out-of-core.md "Row blocks of the token table"): a layer written block by block is the
// next version once its last block is on flash, and a crash before that leaves it whole at the
// version before; blocks out of order, blocks that are not whole pages and a whole acquire of a
// layer in blocks are refused.
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "layer_store_fixtures.h"
#include "test_util.h"

static char g_dir[1024];

static int setup_dir(void **state) {
    (void)state;
    if (!scratch_dir(g_dir, sizeof g_dir, "./store-blocks")) return 0;
    fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
    return -1;
}

static int teardown_dir(void **state) {
    (void)state;
    if (remove_tree(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
    return 0;
}

enum { BLOCK = 4096, TABLE = 2 * BLOCK + 1808, SMALL = 2000 };  // the table: 3 blocks, the last short

// The pattern of layer idx's floats [first, first + n) at a version, filled or checked (-1: equal).
static long block_pattern(float *const *buf, int n_bufs, size_t first, size_t n, int idx, long version,
                          int write) {
    for (int b = 0; b < n_bufs; b++)
        for (size_t j = 0; j < n; j++) {
            uint32_t want = pattern(idx, b, first + j, version), *u = (uint32_t *)buf[b] + j;
            if (write) *u = want;
            else if (*u != want) return (long)j;
        }
    return -1;
}

static LayerStore *blocked_store(const char *name) {
    const size_t count[2] = {TABLE, SMALL};
    StoreOptions o = opts(0);
    LayerStore *s = make_store(g_dir, name, 2, count, &o);
    FgError err = {0};
    if (layer_store_set_block(s, 0, BLOCK, &err)) fail_msg("%s", err.msg);
    return s;
}

// A step through the stream: the table's blocks, then the small layer, each checked at version 0
// and rewritten with version 1's pattern; reopened, the store holds version 1 whole.
static void test_block_step(void **state) {
    (void)state;
    LayerStore *s = blocked_store("step");
    assert_int_equal(layer_store_n_blocks(s, 0), 3);
    assert_int_equal(layer_store_block_floats(s, 0, 2), 1808);
    LayerStream ls;
    FgError err = {0};
    if (layer_stream_store_open(&ls, s, 2, 0, 0, &err)) fail_msg("%s", err.msg);
    LayerView v;
    assert_int_not_equal(ls.acquire(&ls, 0, &v, &err), 0);  // the table is only had by blocks
    assert_non_null(strstr(err.msg, "read in 3 row blocks"));
    for (int b = 0; b < 3; b++) {
        if (b + 1 < 3) assert_int_equal(ls.prefetch_block(&ls, 0, b + 1, &err), 0);
        if (ls.acquire_block(&ls, 0, b, &v, &err)) fail_msg("%s", err.msg);
        assert_int_equal(v.first, (size_t)b * BLOCK);
        assert_int_equal(v.version, 0);
        assert_int_equal(block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 0, 0), -1);
        block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 1, 1);
        if (ls.release_block(&ls, 0, b, 1, &err)) fail_msg("%s", err.msg);
    }
    if (ls.acquire(&ls, 2, &v, &err)) fail_msg("%s", err.msg);  // store layer 1 is model layer 2
    block_pattern(v.buf, v.n_bufs, 0, v.count, 1, 1, 1);
    if (ls.release(&ls, 2, 1, &err) || ls.close(&ls, &err)) fail_msg("%s", err.msg);
    if (layer_store_open(&s, g_dir, "step", &err)) fail_msg("%s", err.msg);
    expect_version(s, 1);  // whole-layer reads of both layers: the file's layout is the same
    layer_store_close(s);
}

// Two of the table's three blocks of version 1 written, then a crash (the store closed without
// the last block): the written blocks read back as version 1 before, and reopened the table
// and the store are whole at version 0. Blocks out of order are refused.
static void test_block_crash(void **state) {
    (void)state;
    LayerStore *s = blocked_store("crash");
    unsigned char *mem = dio_alloc(layer_store_max_block_slot_bytes(s));
    float *buf[3];
    for (int b = 0; b < 3; b++) buf[b] = (float *)(mem + (size_t)b * layer_store_block_stride(s, 0));
    FgError err = {0};
    assert_int_not_equal(layer_store_write_block(s, 0, 1, 1, mem, &err), 0);
    assert_non_null(strstr(err.msg, "out of order"));
    for (int b = 0; b < 2; b++) {
        block_pattern(buf, 3, (size_t)b * BLOCK, BLOCK, 0, 1, 1);
        if (layer_store_write_block(s, 0, b, 1, mem, &err)) fail_msg("%s", err.msg);
    }
    assert_int_equal(layer_store_layer_version(s, 0), 0);  // not before its last block
    if (layer_store_read_block(s, 0, 0, mem, &err)) fail_msg("%s", err.msg);
    assert_int_equal(block_pattern(buf, 3, 0, BLOCK, 0, 1, 0), -1);
    if (layer_store_read_block(s, 0, 2, mem, &err)) fail_msg("%s", err.msg);
    assert_int_equal(block_pattern(buf, 3, 2 * BLOCK, 1808, 0, 0, 0), -1);
    assert_int_not_equal(layer_store_write_block(s, 0, 0, 2, mem, &err), 0);  // version 2 before 1 is whole
    layer_store_close(s);  // the crash
    if (layer_store_open(&s, g_dir, "crash", &err)) fail_msg("%s", err.msg);
    expect_version(s, 0);
    assert_int_not_equal(layer_store_set_block(s, 0, 1000, &err), 0);  // not whole 4 KiB pages
    assert_non_null(strstr(err.msg, "are not whole 4096-byte pages"));
    fg_free(mem);
    layer_store_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_block_step, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_block_crash, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests_name("layer_store_blocks", tests, NULL, NULL);
}
