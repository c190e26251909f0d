// The layer stream (src/stage/layer_stream.h) over a layer store (layer_store.h): n_slots host
// buffers sized for the largest layer, a read thread and a write thread, each serving its
// requests in the order they were asked for.
#ifndef FGPIPE_LAYER_STREAM_STORE_H
#define FGPIPE_LAYER_STREAM_STORE_H

#include "layer_store.h"
#include "layer_stream.h"

// Takes ownership of store (closed by s->close, or here on failure). At least one slot of the
// largest unit and two in all: one layer computing, one being read ahead (or written back);
// the smaller classes (SlotClasses) let a budget too small for many large slots still read the
// small layers far ahead.
int layer_stream_store_open_in(LayerStream *s, LayerStore *store, const SlotClasses *slots,
                               void *memory, size_t memory_bytes, FgError *err);
// With the slots in the caller's memory (4 KiB aligned, the classes in order:
// layer_stream_store_slots_bytes; e.g. a node's shared block), which the stream neither
// allocates nor frees; memory NULL: the stream's own.
size_t layer_stream_store_slots_bytes(const LayerStore *store, const SlotClasses *slots);
// n_slots of the largest unit and n_small of the units of at most small_count floats.
int layer_stream_store_open(LayerStream *s, LayerStore *store, int n_slots, int n_small,
                            size_t small_count, FgError *err);

#endif
