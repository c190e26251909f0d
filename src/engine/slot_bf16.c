// A streamed stage's BF16 weights (slot_bf16.h).
#include "slot_bf16.h"

#include <stdlib.h>

void slot_bf16_open(SlotBf16 *b, const Config *c, const Model *m, int first, int last, const SlotPlan *sp) {
    *b = (SlotBf16){.m = m};
    b->slot16 = calloc((size_t)m->n_layers, 1);
    b->copy16 = calloc((size_t)m->n_layers, 1);
    for (int l = first; sp->weights16 && l < last; l++) {
        b->slot16[l] = (unsigned char)slot_plan_slot16(c, m, l);
        b->copy16[l] = (unsigned char)slot_plan_copy16(c, m, l);
    }
    if (sp->copy16) b->copy = fg_alloc_bytes(sp->copy16 * sizeof(uint16_t));
    b->convert = cpu_bf16_missing() ? bf16_convert_scalar : bf16_convert_avx512;
}

void slot_bf16_close(SlotBf16 *b) {
    free(b->slot16), free(b->copy16);
    fg_free(b->copy), fg_free(b->wide);
    *b = (SlotBf16){0};
}

static void make_copy(SlotBf16 *b, int layer, const LayerSlot *s) {
    Bf16Convert convert = layer_source_convert16(&b->m->layers[layer], b->convert);
    bf16_convert_rows(convert, s->params, 1, (int)s->count, (int)s->count, b->copy);
    b->copies++;
}

void slot_bf16_acquire(SlotBf16 *b, int layer, const LayerView *v, float *buf0, unsigned parts,
                       LayerSlot *out) {
    out->params = buf0, out->params16 = NULL;
    if (v->bf16) {  // a BF16 slot: the GEMMs read it where it lies, a reader of floats a copy
        out->params16 = (const uint16_t *)v->buf[0];
        out->params = NULL;
        b->as_read++;
        if (!(parts & LAYER_FLOATS)) return;
        b->wide = fg_alloc_floats(out->count);
        bf16_widen(out->params16, b->wide, out->count);
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

void slot_bf16_release(SlotBf16 *b, const LayerView *v, int written, int writes) {
    if (!b->wide) return;
    // A load's values came from BF16 (a base kept in BF16): narrowed back, they are its bits.
    if (written && writes) bf16_narrow(b->wide, (uint16_t *)v->buf[0], v->count);
    fg_free(b->wide);
    b->wide = NULL;
}
