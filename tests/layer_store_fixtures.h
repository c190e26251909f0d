// Fixtures of the layer store tests (test_layer_store.c, test_layer_store_mounts.c): stores of
// patterned layers, their checks and a stream over them. Header-only, like test_util.h.
#ifndef FGPIPE_LAYER_STORE_FIXTURES_H
#define FGPIPE_LAYER_STORE_FIXTURES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "direct_io.h"
#include "layer_store.h"
#include "layer_stream_store.h"

// Bits of element i of buffer b of store layer idx at a version: every (layer, buffer, version)
// distinct, so a slot from the wrong version or layer cannot pass for the right one.
static inline uint32_t pattern(int idx, int b, size_t i, long version) {
    uint64_t x = ((uint64_t)idx * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)b << 40) ^ ((uint64_t)version << 48) ^ i;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
    return (uint32_t)x;
}

static inline void fill(float *const *buf, int n_bufs, size_t count, int idx, long version) {
    for (int b = 0; b < n_bufs; b++) {
        uint32_t *u = (uint32_t *)buf[b];
        for (size_t i = 0; i < count; i++) u[i] = pattern(idx, b, i, version);
    }
}

// Index of the first element that differs from the pattern, or -1.
static inline long check(float *const *buf, int n_bufs, size_t count, int idx, long version) {
    for (int b = 0; b < n_bufs; b++) {
        const uint32_t *u = (const uint32_t *)buf[b];
        for (size_t i = 0; i < count; i++)
            if (u[i] != pattern(idx, b, i, version)) return (long)i;
    }
    return -1;
}

static inline void slot_views(const LayerStore *s, int i, unsigned char *mem, float **buf) {
    for (int b = 0; b < layer_store_n_bufs(s); b++) buf[b] = (float *)(mem + (size_t)b * layer_store_buf_stride(s, i));
}

static inline StoreOptions opts(size_t aux) {
    return (StoreOptions){.n_bufs = 3, .aux_bytes = aux, .preallocate = 1};
}

// Creates a store of n layers of count[i] floats and writes version 0 (aux 0 = the version);
// the layers are named fc1, fc2, ... or all `same_name`.
static inline LayerStore *make_store_named(const char *dir, const char *name, int n, const size_t *count,
                                    const StoreOptions *o, const char *same_name) {
    StoreLayer layers[MODEL_MAX_LAYERS];
    for (int i = 0; i < n; i++) {
        memset(&layers[i], 0, sizeof layers[i]);
        if (same_name) snprintf(layers[i].name, sizeof layers[i].name, "%s", same_name);
        else snprintf(layers[i].name, sizeof layers[i].name, "fc%d", i + 1);
        layers[i].layer = 2 * i;  // linear layers with activations between them
        layers[i].count = count[i];
    }
    LayerStore *s;
    FgError err = {0};
    if (layer_store_create(&s, dir, name, n, layers, o, &err)) fail_msg("%s", err.msg);
    long v0 = 0;
    if (o->aux_bytes && layer_store_write_aux(s, 0, &v0, &err)) fail_msg("%s", err.msg);
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    for (int i = 0; i < n; i++) {
        float *buf[3];
        slot_views(s, i, mem, buf);
        fill(buf, o->n_bufs, count[i], i, 0);
        if (layer_store_write(s, i, 0, mem, &err)) fail_msg("%s", err.msg);
    }
    fg_free(mem);
    return s;
}

static inline LayerStore *make_store(const char *dir, const char *name, int n, const size_t *count,
                              const StoreOptions *o) {
    return make_store_named(dir, name, n, count, o, NULL);
}

// Reads every layer of an open store and checks it holds `version` bit for bit.
static inline void expect_version(LayerStore *s, long version) {
    assert_int_equal(layer_store_version(s), version);
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    FgError err = {0};
    for (int i = 0; i < layer_store_n_layers(s); i++) {
        assert_int_equal(layer_store_layer_version(s, i), version);
        if (layer_store_read(s, i, mem, &err)) fail_msg("%s", err.msg);
        float *buf[3];
        slot_views(s, i, mem, buf);
        long bad = check(buf, layer_store_n_bufs(s), layer_store_layer(s, i)->count, i, version);
        if (bad >= 0) fail_msg("layer %d differs from version %ld at element %ld", i, version, bad);
    }
    if (layer_store_aux_bytes(s)) {
        long aux = -1;
        if (layer_store_read_aux(s, &aux, &err)) fail_msg("%s", err.msg);
        assert_int_equal(aux, version);
    }
    fg_free(mem);
}

// One step through the stream in layer-major order: every layer read, checked at version - 1,
// rewritten with the pattern of `version`, released dirty. Returns the first error.
static inline int stream_step(LayerStream *ls, const LayerStore *meta, int n, long version, FgError *err) {
    int rc = ls->write_aux(ls, version, &version, err);
    for (int i = 0; i < n && !rc; i++) {
        int layer = 2 * i;
        if (i + 1 < n && (rc = ls->prefetch(ls, layer + 2, err))) break;
        LayerView v;
        if ((rc = ls->acquire(ls, layer, &v, err))) break;
        if (v.version != version - 1 || check(v.buf, v.n_bufs, v.count, i, version - 1) >= 0) {
            rc = fg_fail(err, FG_ERR_INTERNAL, "layer %d: version %ld, expected %ld", layer, v.version, version - 1);
            break;
        }
        fill(v.buf, v.n_bufs, v.count, i, version);
        rc = ls->release(ls, layer, 1, err);
    }
    (void)meta;
    return rc;
}

static inline LayerStream open_stream(const char *dir, const char *name, int slots, int n_small,
                               size_t small_count) {
    LayerStore *s;
    FgError err = {0};
    if (layer_store_open(&s, dir, name, &err)) fail_msg("%s", err.msg);
    LayerStream ls;
    if (layer_stream_store_open(&ls, s, slots, n_small, small_count, &err)) fail_msg("%s", err.msg);
    return ls;
}

// ---- tests ----

#endif
