// The layer stream (src/stage/layer_stream.h) over a layer store (layer_store.h): n_slots host
// buffers sized for the largest layer, a read thread and a write thread, each serving its
// requests in the order they were asked for.
#ifndef FGPIPE_LAYER_STREAM_STORE_H
#define FGPIPE_LAYER_STREAM_STORE_H

#include "layer_store.h"
#include "layer_stream.h"

// Takes ownership of store (closed by s->close, or here on failure). n_slots >= 2 slots of the
// largest layer: one layer computing, one being read ahead (or written back); n_small more
// slots for layers of at most small_count floats (a GPT's blocks beside its token table), so
// that a budget too small for many large slots still reads the small layers far ahead.
int layer_stream_store_open(LayerStream *s, LayerStore *store, int n_slots, int n_small,
                            size_t small_count, FgError *err);
// The same with the slots in the caller's memory (4 KiB aligned, the large slots then the
// small ones: layer_stream_store_slots_bytes; e.g. a node's shared block), which the stream
// neither allocates nor frees.
int layer_stream_store_open_in(LayerStream *s, LayerStore *store, int n_slots, int n_small,
                               size_t small_count, void *memory, size_t memory_bytes, FgError *err);
size_t layer_stream_store_slots_bytes(const LayerStore *store, int n_slots, int n_small,
                                      size_t small_count);

#endif
