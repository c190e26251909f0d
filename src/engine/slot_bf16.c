// A streamed stage's BF16 weights (slot_bf16.h).
#include "slot_bf16.h"

#include <stdlib.h>

void slot_bf16_open(SlotBf16 *b, const Backend *be, const Config *c, const Model *m, int first,
                    int last, const SlotPlan *sp) {
    *b = (SlotBf16){.be = be, .m = m};
    b->slot16 = calloc((size_t)m->n_layers, 1);
    b->copy16 = calloc((size_t)m->n_layers, 1);
    for (int l = first; sp->weights16 && l < last; l++) {
        b->slot16[l] = (unsigned char)slot_plan_slot16(c, m, l);
        b->copy16[l] = (unsigned char)slot_plan_copy16(c, m, l);
    }
    if (sp->copy16) b->copy = be->alloc(be, sp->copy16 * sizeof(uint16_t));
}

void slot_bf16_close(SlotBf16 *b) {
    free(b->slot16), free(b->copy16);
    if (b->copy) b->be->free(b->be, b->copy);
    *b = (SlotBf16){0};
}

static void make_copy(SlotBf16 *b, int layer, const LayerSlot *s) {
    b->be->narrow16(b->be, s->params, b->copy, s->count, layer_source_how16(&b->m->layers[layer]));
    b->copies++;
}

void slot_bf16_acquire(SlotBf16 *b, int layer, const LayerView *v, float *buf0, unsigned parts,
                       LayerSlot *out) {
    out->params = buf0, out->params16 = NULL;
    if (v->bf16) {  // a BF16 slot: the GEMMs read it where it lies, a reader of floats a copy
        out->params16 = (const uint16_t *)buf0;
        out->params = NULL;
        b->as_read++;
        if (!(parts & LAYER_FLOATS)) return;
        // Only checkpoints and loads read floats: the buffer lives while they hold the layer.
        b->widened = (uint16_t *)buf0, b->widened_count = out->count, b->widened_layer = layer;
        b->wide = backend_alloc_floats(b->be, out->count);
        b->be->widen16(b->be, out->params16, b->wide, out->count);
        out->params = b->wide;
        return;
    }
    if (!b->copy16 || !b->copy16[layer]) return;
    make_copy(b, layer, out);
    out->params16 = b->copy;
}

void slot_bf16_refresh(SlotBf16 *b, int layer, const LayerSlot *s) {
    if (b->copy && s->params16 == b->copy) make_copy(b, layer, s);
}

void slot_bf16_release(SlotBf16 *b, int written, int writes) {
    if (!b->widened) return;
    // A load's values came from BF16 (a base kept in BF16): narrowed back, they are its bits.
    if (written && writes)
        b->be->narrow16(b->be, b->wide, b->widened, b->widened_count,
                        layer_source_how16(&b->m->layers[b->widened_layer]));
    b->be->free(b->be, b->wide);
    b->wide = NULL, b->widened = NULL;
}
