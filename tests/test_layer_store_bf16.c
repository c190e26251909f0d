// A frozen layer kept in BF16 in the layer store (io/layer_store_bf16.c): half the bytes on
// flash, its values back in float32 exactly, whole and by row blocks, across chunks of the
// write; other values rounded to nearest even; a trained layer never BF16.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hdf5.h>

#include "bf16.h"
#include "direct_io.h"
#include "layer_store.h"
#include "test_util.h"

static char g_dir[1024];

static int setup_dir(void **state) {
    (void)state;
    return scratch_dir(g_dir, sizeof g_dir, "./store-bf16") ? -1 : 0;
}

static int teardown_dir(void **state) {
    (void)state;
    remove_tree(g_dir);
    return 0;
}

enum { BASE = (1 << 20) + 4097 };  // more than one write chunk, a partial last page

static float value(size_t k) {  // BF16 values of every sign and a wide range of exponents
    uint16_t h = (uint16_t)(((k * 2654435761u) >> 7) & 0xffff);
    if ((h & 0x7f80) == 0x7f80) h &= 0xbfff;  // no infinities or NaNs
    return bf16_to_f32(h);
}

static LayerStore *made_store(float *base) {
    StoreLayer layers[2] = {{"fc1", 0, 3000, 0, 1, 0}, {"base", 1, BASE, 1, 1, 0}};  // fc1 trained: FP32
    StoreOptions o = {.n_bufs = 3};
    LayerStore *s;
    FgError err = {0};
    if (layer_store_create(&s, g_dir, "b", 2, layers, &o, &err)) fail_msg("%s", err.msg);
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    for (size_t k = 0; k < 3 * 3000; k++) ((float *)mem)[k] = (float)k;
    if (layer_store_write(s, 0, 0, mem, &err)) fail_msg("%s", err.msg);
    for (size_t k = 0; k < BASE; k++) base[k] = value(k);
    memcpy(mem, base, BASE * sizeof(float));
    if (layer_store_write(s, 1, 0, mem, &err)) fail_msg("%s", err.msg);
    fg_free(mem);
    return s;
}

static void test_bf16_roundtrip(void **state) {
    (void)state;
    float *base = malloc(BASE * sizeof(float));
    LayerStore *s = made_store(base);
    layer_store_close(s);
    FgError err = {0};
    if (layer_store_open(&s, g_dir, "b", &err)) fail_msg("%s", err.msg);
    assert_false(layer_store_layer(s, 0)->bf16);  // a trained layer stays FP32
    assert_true(layer_store_layer(s, 1)->bf16);
    assert_int_equal(layer_store_disk_bytes(s, 1), dio_round_up(BASE * 2));
    assert_int_equal(layer_store_slot_bytes(s, 1), dio_round_up(BASE * 4));
    float *mem = dio_alloc(layer_store_max_slot_bytes(s));
    if (layer_store_read(s, 1, mem, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(mem, base, BASE * sizeof(float));
    if (layer_store_read(s, 0, mem, &err)) fail_msg("%s", err.msg);
    assert_true(mem[8999] == 8999.0f);
    // Row blocks: whole pages of BF16 (2048 values), read back widened
    assert_int_not_equal(layer_store_set_block(s, 1, 1024, &err), FG_OK);
    assert_non_null(strstr(err.msg, "2-byte values on flash"));
    if (layer_store_set_block(s, 1, 2048 * 100, &err)) fail_msg("%s", err.msg);
    for (int b = 0; b < layer_store_n_blocks(s, 1); b++) {
        assert_int_equal(layer_store_block_bytes(s, 1, b), dio_round_up(layer_store_block_floats(s, 1, b) * 2));
        if (layer_store_read_block(s, 1, b, mem, &err)) fail_msg("%s", err.msg);
        assert_memory_equal(mem, base + (size_t)b * 2048 * 100, layer_store_block_floats(s, 1, b) * sizeof(float));
    }
    layer_store_close(s);
    fg_free(mem);
    free(base);
}

// The file holds 2-byte values; a value that is not BF16's is rounded to nearest even.
static void test_bf16_file(void **state) {
    (void)state;
    float *base = malloc(BASE * sizeof(float));
    LayerStore *s = made_store(base);
    FgError err = {0};
    float *mem = dio_alloc(layer_store_max_slot_bytes(s));
    memcpy(mem, base, BASE * sizeof(float));
    mem[5] = 1.0f + 1.0f / 256 + 1.0f / 512;  // between two BF16 values: rounds up to even
    if (layer_store_write(s, 1, 1, mem, &err)) fail_msg("%s", err.msg);
    if (layer_store_read(s, 1, mem, &err)) fail_msg("%s", err.msg);
    assert_true(mem[5] == 1.0f + 2.0f / 256);
    layer_store_close(s);
    char file[1100];
    snprintf(file, sizeof file, "%s/b.h5", g_dir);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "slot0/1.base", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    assert_int_equal(H5Tget_size(t), 2);
    H5Tclose(t), H5Dclose(d), H5Fclose(f);
    fg_free(mem);
    free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bf16_roundtrip, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bf16_file, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
