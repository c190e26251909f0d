// A streamed stage's BF16 weights in a bf16 run (slot_plan.h's slot16 and copy16), what the
// streamed source (source_streamed.c) hands its GEMMs: a frozen base kept in BF16 whose slot
// holds its values as read (LayerView.bf16), given to the GEMMs where it lies; a layer in an
// FP32 slot with its BF16 copy, made once per acquire (and again when an update writes it while
// pinned), never per GEMM call. Which layer is which was decided at plan time (slot_plan.c); a
// run in fp32 has neither, and its acquires pass through unchanged.
//
// Everything here is the backend's: the copy and the widened buffer are its memory (device
// memory on a GPU, beside the lanes of device_lanes.h), the conversions its narrow16 and
// widen16, the same bits as the resident source's copy (source_resident.c, refresh16).
#ifndef FGPIPE_SLOT_BF16_H
#define FGPIPE_SLOT_BF16_H

#include <stdint.h>

#include "layer_source.h"
#include "slot_plan.h"

typedef struct {
    const Backend *be;
    const Model *m;
    unsigned char *slot16;  // per model layer: its slot holds BF16 (LayerStreamSpec.slot16)
    unsigned char *copy16;  // per model layer: its GEMMs read a copy of its FP32 slot
    uint16_t *copy;         // the held layer's copy (SlotPlan.copy16 values), or NULL
    float *wide;            // a BF16 slot widened for a reader of floats (LAYER_FLOATS), from
                            // its acquire to its release (a checkpoint, a load), or NULL
    uint16_t *widened;      // the BF16 values in wide (the slot, or its lane), NULL: none
    size_t widened_count;
    int widened_layer;
    long copies;            // copies made, and BF16 slots handed over as they lie, so far
    long as_read;
} SlotBf16;

// The plan's layers [first, last) of the model (none unless sp->weights16), and the copy and
// the widened buffer in be's memory.
void slot_bf16_open(SlotBf16 *b, const Backend *be, const Config *c, const Model *m, int first,
                    int last, const SlotPlan *sp);
void slot_bf16_close(SlotBf16 *b);

// The weights of an acquired layer whose buffer 0 lies at buf0 (the host slot, or its lane on
// a device): out->params (NULL for a BF16 slot, unless parts has LAYER_FLOATS: then widened
// into b->wide) and out->params16 (buf0 itself for a BF16 slot, the copy, or NULL); layer is
// the model's layer the view holds (the twin's: the embedding's).
void slot_bf16_acquire(SlotBf16 *b, int layer, const LayerView *v, float *buf0, unsigned parts,
                       LayerSlot *out);
// The held layer's weights were written while pinned: its copy made again.
void slot_bf16_refresh(SlotBf16 *b, int layer, const LayerSlot *s);
// Before the stream takes the slot back (and before a device's lane goes back into it):
// widened weights that were written go back into the BF16 values acquire handed out (writes:
// this rank changes the slot, not a replica that reads its node's).
void slot_bf16_release(SlotBf16 *b, int written, int writes);

#endif
