// A frozen layer kept in BF16 (StoreLayer.bf16): its bytes on flash are bfloat16, its slot in
// memory float32. A read lands the BF16 bytes in the slot's first half and widens them in place,
// last value first, so that no value is overwritten before it is read; a write rounds a chunk at
// a time into a small page-aligned scratch (a load's values came from BF16: exact).
#include <string.h>

#include "bf16.h"
#include "layer_store_internal.h"

enum { CHUNK_VALUES = 1 << 20 };  // 2 MiB of BF16 per write: whole pages, a small scratch

size_t store_elem_bytes(const LayerStore *s, int i) { return s->layers[i].bf16 ? 2 : sizeof(float); }
size_t store_disk_stride(const LayerStore *s, int i) {
    return dio_round_up(s->layers[i].count * store_elem_bytes(s, i));
}

// Round to nearest even, denormals kept (bf16_round flushes them as the CPU's instruction does:
// a base's tiny weights must come back as they went in).
static void narrow(const float *x, uint16_t *y, size_t n) {
    for (size_t k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &x[k], sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) y[k] = (uint16_t)((u >> 16) | 0x40u);  // NaN: quiet
        else y[k] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

int store_read_values(LayerStore *s, int i, void *buf, size_t count, uint64_t off, FgError *err) {
    int rc = dio_read(&s->f, buf, dio_round_up(count * store_elem_bytes(s, i)), off, err);
    if (!rc && s->layers[i].bf16) bf16_widen_in_place(buf, count);
    return rc;
}

int store_write_values(LayerStore *s, int i, const void *buf, size_t count, uint64_t off, FgError *err) {
    if (!s->layers[i].bf16) return dio_write(&s->f, buf, dio_round_up(count * sizeof(float)), off, err);
    if (!s->scratch) s->scratch = dio_alloc(CHUNK_VALUES * sizeof(uint16_t));
    const float *x = buf;
    int rc = FG_OK;
    for (size_t k = 0; k < count && !rc; k += CHUNK_VALUES) {
        size_t n = FG_MIN((size_t)CHUNK_VALUES, count - k), bytes = dio_round_up(n * sizeof(uint16_t));
        memset(s->scratch, 0, bytes);
        narrow(x + k, s->scratch, n);
        rc = dio_write(&s->f, s->scratch, bytes, off + k * sizeof(uint16_t), err);
    }
    return rc;
}
