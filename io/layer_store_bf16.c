// A frozen layer kept in BF16 (StoreLayer.bf16): its bytes on flash are bfloat16, its slot in
// memory float32. A read lands the BF16 bytes in the slot's first half and widens them in place,
// last value first, so that no value is overwritten before it is read; a write rounds a chunk at
// a time into a small page-aligned scratch (a load's values came from BF16: exact). A layer whose
// slot holds BF16 (StoreLayer.slot16: its only reads are BF16 GEMMs) moves its bytes as they are.
#include <string.h>

#include "bf16.h"
#include "layer_store_internal.h"

enum { CHUNK_VALUES = 1 << 20 };  // 2 MiB of BF16 per write: whole pages, a small scratch

size_t store_elem_bytes(const LayerStore *s, int i) { return s->layers[i].bf16 ? 2 : sizeof(float); }
size_t layer_store_slot_elem_bytes(const LayerStore *s, int i) { return s->layers[i].slot16 ? 2 : sizeof(float); }

int layer_store_set_slot16(LayerStore *s, int i, FgError *err) {
    if (!s->layers[i].bf16)
        return fg_fail(err, FG_ERR_INPUT, "layer store %s keeps layer %s in float32; this run reads "
                       "it as a base kept in BF16 (its checkpoint's dtype): start from the "
                       "checkpoint (--init-from) instead of --resume-weights", s->path, s->layers[i].name);
    s->layers[i].slot16 = 1;
    return FG_OK;
}
size_t store_disk_stride(const LayerStore *s, int i) {
    return dio_round_up(s->layers[i].count * store_elem_bytes(s, i));
}

int store_read_values(LayerStore *s, int i, void *buf, size_t count, uint64_t off, FgError *err) {
    int rc = dio_read(&s->f, buf, dio_round_up(count * store_elem_bytes(s, i)), off, err);
    if (!rc && s->layers[i].bf16 && !s->layers[i].slot16) bf16_widen_in_place(buf, count);
    return rc;
}

int store_write_values(LayerStore *s, int i, const void *buf, size_t count, uint64_t off, FgError *err) {
    if (!s->layers[i].bf16 || s->layers[i].slot16)
        return dio_write(&s->f, buf, dio_round_up(count * store_elem_bytes(s, i)), off, err);
    if (!s->scratch) s->scratch = dio_alloc(CHUNK_VALUES * sizeof(uint16_t));
    const float *x = buf;
    int rc = FG_OK;
    for (size_t k = 0; k < count && !rc; k += CHUNK_VALUES) {
        size_t n = FG_MIN((size_t)CHUNK_VALUES, count - k), bytes = dio_round_up(n * sizeof(uint16_t));
        memset(s->scratch, 0, bytes);
        bf16_narrow(x + k, s->scratch, n);  // denormals kept: a base's tiny weights come back
        rc = dio_write(&s->f, s->scratch, bytes, off + k * sizeof(uint16_t), err);
    }
    return rc;
}
