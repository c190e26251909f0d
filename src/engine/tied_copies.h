// The tied embedding's copies on a stage (tied_copies.c).
#ifndef FGPIPE_TIED_COPIES_H
#define FGPIPE_TIED_COPIES_H

#include "engine_ops.h"

// A streamed stage's memory for the op-U gradient of a copy of the tied embedding
// (LayerSource.tied_grad), or NULL: not a tied layer, resident, or not on this stage.
float *tied_buffer(const Pipeline *p, int l);
// Its region of the spill file (LayerSource.tied_spill), or -1.
int tied_region(const Pipeline *p, int l);
// A tied copy whose op-U gradient is kept apart from the layer source (memory or flash).
int tied_apart(const Pipeline *p, int l);
// Kept once (LayerSource.tied_once): l is the embedding, which adds the head's gradient to its
// own and steps in the backward wave, while the head's waits for it.
int tied_takes_head(const Pipeline *p, int l);
// A spilled copy's gradient of the slot's rows into the layer-sized buffer (nothing in memory).
int tied_fetch(Pipeline *p, int l, const LayerSlot *s, FgError *err);
// g, a copy's gradient of the slot's rows, onto flash (nothing when kept in memory).
int tied_keep(Pipeline *p, int l, const LayerSlot *s, const float *g, FgError *err);
// Kept once (LayerSource.tied_once): the head's gradient added into the embedding's slot rows.
int tied_add_head_gradient(Pipeline *p, LayerSlot *s, FgError *err);
// x += y (y: the other copy, here or on the other end stage), then y = x, a piece at a time.
int tied_sum_pieces(Pipeline *p, int mine, float *x, float *y, int both, FgError *err);

#endif
