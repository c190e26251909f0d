// A pipeline stage's layer stream on local flash: the LayerStreams.open of src/stage/layer_stream.h
// over the layer store (layer_store.h) and its stream (layer_stream_store.h).
#ifndef FGPIPE_STAGE_STORE_H
#define FGPIPE_STAGE_STORE_H

#include "layer_stream.h"

// Makes DIR/NAME.h5 for the stage's layers with version 0 written one layer at a time (never
// the whole stage in memory), or reopens it; then opens a stream of spec->n_slots slots.
// A reopened store must have been made for the same layers and buffers. arg is unused.
int stage_store_open(void *arg, const LayerStreamSpec *spec, LayerStream *out, FgError *err);

#endif
