// The layer stream (src/stage/layer_stream.h) over a layer store (layer_store.h): n_slots host
// buffers sized for the largest layer, one I/O thread that serves reads and write-backs in the
// order they were asked for.
#ifndef FGPIPE_LAYER_STREAM_STORE_H
#define FGPIPE_LAYER_STREAM_STORE_H

#include "layer_store.h"
#include "layer_stream.h"

// Takes ownership of store (closed by s->close, or here on failure). n_slots >= 2: one layer
// computing, one being read ahead (or written back).
int layer_stream_store_open(LayerStream *s, LayerStore *store, int n_slots, FgError *err);
// The same with the slots in the caller's memory (4 KiB aligned, n_slots times the store's
// largest slot; e.g. a node's shared block), which the stream neither allocates nor frees.
int layer_stream_store_open_in(LayerStream *s, LayerStore *store, int n_slots, void *memory,
                               size_t memory_bytes, FgError *err);

#endif
