// Row blocks of a layer in the store (layer_store.h, docs/out-of-core.md "Row blocks of the token
// table"): byte ranges of the layer's datasets, so the file is the same either way. A version is
// written block by block into the slot that does not hold the current one, and stamped after its
// last block: a crash before leaves the layer at its current version.
#include <stdatomic.h>
#include <string.h>

#include "layer_store_internal.h"

int layer_store_set_block(LayerStore *s, int i, size_t floats, FgError *err) {
    if (floats % (DIO_ALIGN / store_elem_bytes(s, i)))
        return fg_fail(err, FG_ERR_INPUT, "layer store %s: blocks of %zu values of layer %s are not "
                       "whole %d-byte pages (%zu-byte values on flash)", s->path, floats,
                       s->layers[i].name, DIO_ALIGN, store_elem_bytes(s, i));
    s->block[i] = floats >= s->layers[i].count ? 0 : floats;
    return FG_OK;
}

int layer_store_n_blocks(const LayerStore *s, int i) {
    return s->block[i] ? (int)((s->layers[i].count + s->block[i] - 1) / s->block[i]) : 1;
}

size_t layer_store_block_floats(const LayerStore *s, int i, int b) {
    if (!s->block[i]) return s->layers[i].count;
    return FG_MIN(s->block[i], s->layers[i].count - (size_t)b * s->block[i]);
}

size_t layer_store_block_stride(const LayerStore *s, int i) {
    return s->block[i] ? s->block[i] * layer_store_slot_elem_bytes(s, i) : store_stride(s, i);
}

size_t layer_store_block_slot_bytes(const LayerStore *s, int i) {
    return (size_t)layer_store_layer_bufs(s, i) * layer_store_block_stride(s, i);
}

size_t layer_store_max_block_slot_bytes(const LayerStore *s) {
    size_t m = 0;
    for (int i = 0; i < s->n; i++) m = FG_MAX(m, layer_store_block_slot_bytes(s, i));
    return m;
}

size_t layer_store_block_bytes(const LayerStore *s, int i, int b) {
    return layer_store_bufs_bytes(s, i, b, 0, layer_store_layer_bufs(s, i));
}

size_t layer_store_bufs_bytes(const LayerStore *s, int i, int b, int k0, int k1) {
    return (size_t)(k1 - k0) * dio_round_up(layer_store_block_floats(s, i, b) * store_elem_bytes(s, i));
}

// Each buffer's part of block b in the store's slot (read) or from buf (write): the last block
// runs to the padded end of its buffer, so every range is whole pages.
static int block_io(LayerStore *s, int i, int b, int slot, void *buf, int k0, int k1, int write,
                    FgError *err) {
    size_t first = (size_t)b * s->block[i] * store_elem_bytes(s, i);
    size_t count = layer_store_block_floats(s, i, b);
    int rc = FG_OK;
    for (int k = k0; k < k1 && !rc; k++) {
        unsigned char *mem = (unsigned char *)buf + (size_t)k * layer_store_block_stride(s, i);
        uint64_t off = s->slot_off[i][slot] + (uint64_t)k * store_disk_stride(s, i) + first;
        rc = write ? store_write_values(s, i, mem, count, off, err)
                   : store_read_values(s, i, mem, count, off, err);
    }
    return rc;
}

int layer_store_read_block(LayerStore *s, int i, int b, void *buf, FgError *err) {
    return layer_store_read_block_from(s, i, b, s->pend_ver[i] >= 0 && b < s->pend_next[i], buf, err);
}

// Reads only what the writer of block b's version leaves alone: pend_slot is set before that
// version's first block is written, cur changes with its last block. A layer kept once (frozen)
// has no current version while a load rewrites its one copy in order (store_begin_layer_write,
// on the stream's write thread): the blocks the stream has not seen written still hold the
// version before there.
int layer_store_read_block_from(LayerStore *s, int i, int b, int pending, void *buf, FgError *err) {
    if (!s->block[i]) return layer_store_read(s, i, buf, err);
    return layer_store_read_bufs_from(s, i, b, pending, 0, layer_store_layer_bufs(s, i), buf, err);
}

int layer_store_read_bufs_from(LayerStore *s, int i, int b, int pending, int k0, int k1, void *buf,
                               FgError *err) {
    int slot = s->cur[i];
    atomic_thread_fence(memory_order_acquire);
    if (slot < 0 && s->rewritten[i]) slot = 0;  // the one copy
    if (slot < 0)
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: layer %s has no version yet",
                       s->path, s->layers[i].name);
    return block_io(s, i, b, pending && s->block[i] ? s->pend_slot[i] : slot, buf, k0, k1, 0, err);
}

int layer_store_write_block(LayerStore *s, int i, int b, long version, const void *buf, FgError *err) {
    if (!s->block[i]) return layer_store_write(s, i, version, buf, err);
    int rc = FG_OK;
    if (b == 0) {
        if ((rc = store_begin_layer_write(s, i, version, &s->pend_slot[i], err))) return rc;
        s->pend_ver[i] = version, s->pend_next[i] = 0;
    } else if (s->pend_ver[i] != version || s->pend_next[i] != b) {
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: block %d of version %ld of %s written "
                       "out of order (block %d of version %ld next)", s->path, b, version,
                       s->layers[i].name, s->pend_next[i], s->pend_ver[i]);
    }
    int slot = s->pend_slot[i];
    if ((rc = block_io(s, i, b, slot, (void *)buf, 0, layer_store_layer_bufs(s, i), 1, err))) return rc;
    s->pend_next[i] = b + 1;
    if (b + 1 < layer_store_n_blocks(s, i)) return FG_OK;
    s->pend_ver[i] = -1;
    if ((rc = store_seal_slot(s, KIND_LAYER, i, slot, version, err))) return rc;
    s->ver[i][slot] = version;
    s->cur[i] = slot;
    return FG_OK;
}
