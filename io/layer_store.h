// A stage's layers on local flash: for every layer with parameters, its parameters and
// optimizer state (Adam m and v, or SGD's momentum), in two slots per layer (one if frozen).
//
// Consistency (docs/out-of-core.md): each slot carries a version stamp (the number of updates
// its contents have received). Version V of a layer is written into the slot that does not
// hold V-1, data first, then (after fdatasync) its stamp. A writer may only write version V
// once every layer has V-1, so at any moment every layer holds the store's consistent version
// C = min over layers of the newest stamp, and a crash at any point reopens as the state after
// a whole step. A frozen layer (StoreLayer.frozen) is outside the rule: only loads write it, C
// counts trained layers only, and it keeps one copy (slot 0), whose version (the load that
// wrote it) holds for every later version; its stamp is cleared before its data is
// overwritten, so a load cut short while writing it leaves it with no version, and a store
// whose frozen layer is newer than C (a load that did not finish) opens refused: there is no
// older copy to go back to. An optional auxiliary blob per version (e.g. the scalars of a
// pending forward-gradient update) is double-buffered the same way.
//
// The file, DIR/NAME.h5: one contiguous early-allocated dataset per layer and slot,
// /slot<s>/<layer> float32 [n_bufs (1 if frozen), padded count] (a frozen layer: slot0 only;
// the attribute frozen_copies = 1 says so; a layer kept in BF16, StoreLayer.bf16: uint16
// [1, padded count] of bfloat16 bits, index_bf16 says which), aligned to 1 MiB
// (H5Pset_alignment); offsets from H5Dget_offset, then read and written with O_DIRECT, no HDF5
// call after open. Readable with h5py.
//
// Not thread-safe: one thread (the streamer's I/O thread) uses a store at a time.
#ifndef FGPIPE_LAYER_STORE_H
#define FGPIPE_LAYER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "layer_stream.h"
#include "model.h"

enum { STORE_MAX_BUFS = 4, STORE_FORMAT_VERSION = 2 };  // params, 2 optimizer states, guide

typedef struct {
    char name[16];  // the model's layer name ("fc1")
    int layer;      // global layer index
    size_t count;   // parameters (floats per buffer)
    int frozen;     // read-only in training (freeze, a LoRA base): its parameters alone (one
                    // buffer, no optimizer state), written by loads only; its newest version
                    // at or below the store's holds for every version after it
    int bf16;       // frozen only: kept as bfloat16 (the dtype it was imported in, Layer.
                    // stored_bf16), half the bytes on flash; widened to float32 as it is read,
                    // rounded to nearest even as it is written (a load's values are exact)
    int slot16;     // bf16 only, set by the stream's opener (layer_store_set_slot16), not saved:
                    // its slot holds the BF16 values as on flash, read and written unwidened
                    // (half the slot's bytes: a base whose only reads are BF16 GEMMs)
} StoreLayer;

typedef struct {
    int n_bufs;        // 1 (params) + optimizer state buffers
    size_t aux_bytes;  // per-version auxiliary blob (0: none)
    int preallocate;   // reserve the file's blocks at creation (fallocate): a full disk fails
                       // at creation, not in the middle of a run
    int staged;        // made as DIR/NAME.new.h5 and renamed over DIR/NAME.h5 by
                       // layer_store_publish: until then an old store of that name stays whole,
                       // and a close before it removes the new one (a refused run)
} StoreOptions;

typedef struct LayerStore LayerStore;

// Creates DIR/NAME.h5 for the layers (replacing an old store of that name). No version is
// written yet: write version 0 of every layer (layer_store_write) before the store can be
// opened. Fails with the path and cause (unwritable dir, disk full).
int layer_store_create(LayerStore **out, const char *dir, const char *name, int n_layers,
                       const StoreLayer *layers, const StoreOptions *opt, FgError *err);
// The store's layers for a stage [first, last) of the model: layers without parameters skipped;
// the model's frozen layers as `frozen` says (LayerStreamSpec.frozen); layer `skip` (-1: none)
// left out (LayerStreamSpec.tied_once).
int layer_store_layers_for_stage(const Model *m, int first, int last, int frozen, int skip,
                                 StoreLayer *out);

// Opens an existing store (its layout comes from the file) and recovers its consistent version.
int layer_store_open(LayerStore **out, const char *dir, const char *name, FgError *err);
// The same, at an older version still held in every layer's other slot (-1: the consistent one).
int layer_store_open_at(LayerStore **out, const char *dir, const char *name, long version,
                        FgError *err);
void layer_store_close(LayerStore *s);
// A staged store becomes DIR/NAME.h5 (its data already on disk; the rename then synced);
// nothing for any other.
int layer_store_publish(LayerStore *s, FgError *err);

int layer_store_n_layers(const LayerStore *s);
const StoreLayer *layer_store_layer(const LayerStore *s, int i);
int layer_store_find(const LayerStore *s, int layer);  // index of a global layer, -1 if absent
int layer_store_n_bufs(const LayerStore *s);
int layer_store_layer_bufs(const LayerStore *s, int i);  // n_bufs, or 1 for a frozen layer
size_t layer_store_aux_bytes(const LayerStore *s);
// Bytes of one layer in memory and in a slot: n_bufs buffers, each count floats padded to
// DIO_ALIGN; buffer b starts at b * layer_store_buf_stride(s, i). A BF16 layer reads and writes
// half of that: layer_store_disk_bytes.
size_t layer_store_slot_bytes(const LayerStore *s, int i);
size_t layer_store_buf_stride(const LayerStore *s, int i);
size_t layer_store_max_slot_bytes(const LayerStore *s);
size_t layer_store_disk_bytes(const LayerStore *s, int i);  // one version of layer i on flash
// Layer i (kept in BF16 on flash) is read into its slot and written from it as BF16 values, never
// widened (StoreLayer.slot16); refused for a layer kept in float32.
int layer_store_set_slot16(LayerStore *s, int i, FgError *err);
size_t layer_store_slot_elem_bytes(const LayerStore *s, int i);  // 2 (slot16) or 4 a value
// Version of layer i now (the newest written), and the consistent version of the store (the
// oldest layer's; -1 while version 0 is incomplete).
long layer_store_layer_version(const LayerStore *s, int i);
long layer_store_version(const LayerStore *s);
// Layers whose newer version, from a step that did not finish, open dropped.
int layer_store_discarded(const LayerStore *s);
// "" or why the store is not using O_DIRECT.
const char *layer_store_note(const LayerStore *s);

// Reads layer i's current version into buf (DIO_ALIGN-aligned, layer_store_slot_bytes).
int layer_store_read(LayerStore *s, int i, void *buf, FgError *err);
// Writes buf as version `version` of layer i: version must be the layer's current + 1 (or 0 on a
// new store; any later version for a frozen layer), and every other layer that is not frozen
// must already have version - 1. On failure the layer keeps its current version (a frozen
// layer: none).
int layer_store_write(LayerStore *s, int i, long version, const void *buf, FgError *err);
// Row blocks (Layer.block_rows, docs/out-of-core.md): layer i read and written `floats` floats of
// each buffer at a time (whole pages of its stored dtype: a multiple of DIO_ALIGN / 4 floats,
// DIO_ALIGN / 2 for a BF16 layer; 0: whole), byte ranges of its datasets: the
// file's layout is the same either way, and nothing of it is saved. A layer without blocks is
// one block; block slots hold its buffers layer_store_block_stride apart.
int layer_store_set_block(LayerStore *s, int i, size_t floats, FgError *err);
int layer_store_n_blocks(const LayerStore *s, int i);
size_t layer_store_block_floats(const LayerStore *s, int i, int b);
size_t layer_store_block_stride(const LayerStore *s, int i);
size_t layer_store_block_slot_bytes(const LayerStore *s, int i);  // a slot for any block
size_t layer_store_max_block_slot_bytes(const LayerStore *s);
size_t layer_store_block_bytes(const LayerStore *s, int i, int b);  // moved by a read or write
size_t layer_store_bufs_bytes(const LayerStore *s, int i, int b, int k0, int k1);  // buffers [k0, k1)
// Block b of layer i's current version (or of the version being written, once that block is).
int layer_store_read_block(LayerStore *s, int i, int b, void *buf, FgError *err);
// The same from the version the caller names (pending: the one being written, whose block b is
// written; else the current one), for a reader on another thread than the writer: it may run
// while the writer writes the layer's other blocks, never its block b nor, unless pending, its
// last block.
int layer_store_read_block_from(LayerStore *s, int i, int b, int pending, void *buf, FgError *err);
// Buffers [k0, k1) of it alone (the parameters without the optimizer state: a pass that only
// reads them), into buf at their places in a block slot (layer_store_block_stride apart).
int layer_store_read_bufs_from(LayerStore *s, int i, int b, int pending, int k0, int k1, void *buf,
                               FgError *err);
// Block b of version `version` of layer i: the blocks in ascending order, block 0 under
// layer_store_write's rule; the layer has the version once its last block is on flash (a crash
// before that leaves it at its previous version, whole).
int layer_store_write_block(LayerStore *s, int i, int b, long version, const void *buf, FgError *err);
// The auxiliary blob: write it for version V before the first layer of V (same rule); read
// returns the blob of the consistent version.
int layer_store_write_aux(LayerStore *s, long version, const void *data, FgError *err);
int layer_store_read_aux(LayerStore *s, void *data, FgError *err);

#endif
