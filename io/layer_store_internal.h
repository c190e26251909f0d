// The layer store's state (layer_store.h), shared by its files: layer_store.c (layout, stamps,
// recovery, whole layers) and layer_store_blocks.c (row blocks). Private to io/.
#ifndef FGPIPE_LAYER_STORE_INTERNAL_H
#define FGPIPE_LAYER_STORE_INTERNAL_H

#include "direct_io.h"
#include "layer_store.h"

enum { ALIGN_SLOT = 1 << 20, HDR_BYTES = DIO_ALIGN, KIND_LAYER = 0, KIND_AUX = 1 };

// One stamp per (layer, slot) and per aux slot, each in its own DIO_ALIGN record so that
// writing it is a single sector-aligned write. crc covers the bytes before it: a torn or
// garbage record reads as "no version".
typedef struct {
    char magic[8];  // "FGSTORE1"
    uint32_t kind, index, slot, n_bufs;
    uint64_t count;
    int64_t version;
    uint32_t crc;
} Stamp;

struct LayerStore {
    int n, n_bufs;
    StoreLayer layers[MODEL_MAX_LAYERS];
    size_t aux_bytes;
    uint64_t hdr_off, aux_off[2], slot_off[MODEL_MAX_LAYERS][2], file_bytes;
    long ver[MODEL_MAX_LAYERS][2], aux_ver[2];  // stamp of each slot, -1: none or invalid
    int cur[MODEL_MAX_LAYERS], aux_cur;          // slot of the newest version, -1: none
    int discarded;                               // slots of an unfinished step found at open
    size_t block[MODEL_MAX_LAYERS];              // floats per row block (0: whole)
    int pend_slot[MODEL_MAX_LAYERS], pend_next[MODEL_MAX_LAYERS];  // a version being written
    long pend_ver[MODEL_MAX_LAYERS];             // block by block (-1: none)
    int rewritten[MODEL_MAX_LAYERS];             // a layer kept once whose one copy is, or was,
                                                 // rewritten in order from a whole version: its
                                                 // blocks not yet written hold that version
    DioFile f;
    unsigned char *rec;  // DIO_ALIGN scratch for one stamp
    unsigned char *aux_buf;
    uint16_t *scratch;   // a BF16 layer's chunk being written (layer_store_bf16.c), or NULL
    char path[1024];  // DIR/NAME.h5 (DIR/NAME.new.h5 until published)
    char final_path[1024];  // "" or, a store made staged (StoreOptions.staged), DIR/NAME.h5
};

// Bytes of a layer's buffer in its slot: its floats padded to DIO_ALIGN.
size_t store_stride(const LayerStore *s, int i);
// A layer's values on flash (layer_store_bf16.c): 2 bytes (a BF16 layer) or 4 each, a buffer
// padded to DIO_ALIGN; read into float32 (count values of one buffer at off) or written from it.
size_t store_elem_bytes(const LayerStore *s, int i);
size_t store_disk_stride(const LayerStore *s, int i);
int store_read_values(LayerStore *s, int i, void *buf, size_t count, uint64_t off, FgError *err);
int store_write_values(LayerStore *s, int i, const void *buf, size_t count, uint64_t off, FgError *err);
// The write rule (layer_store.h): version may be written now.
int store_check_write(LayerStore *s, int kind, int i, long version, FgError *err);
// The slot a write of layer i's version goes to (the other copy, or a frozen layer's only one,
// whose stamp is cleared first), its old version forgotten.
int store_begin_layer_write(LayerStore *s, int i, long version, int *slot, FgError *err);
// After a slot's data: fdatasync, its stamp of version, fdatasync.
int store_seal_slot(LayerStore *s, int kind, int i, int slot, long version, FgError *err);

#endif
