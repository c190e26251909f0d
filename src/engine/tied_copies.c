// The GPT's tied token embedding on a streamed stage (docs/gpt.md, docs/out-of-core.md): where
// each copy's op-U gradient (bp) or estimate (fg, fg+bp) waits from the wave that makes it to
// the update (memory or a spill file on flash), and their sum, a piece at a time. Op U
// (pipeline_update.c) decides when.
#include "tied_copies.h"

// Floats per piece of the tied copies' sum (and per message between the end stages): a
// multiple of SPILL_ALIGN_FLOATS.
enum { TIE_PIECE = 1 << 20 };

// A streamed stage's memory for the op-U gradient of a copy of the tied embedding
// (LayerSource.tied_grad), or NULL: not a tied layer, resident, or not on this stage.
float *tied_buffer(const Pipeline *p, int l) {
    const Model *m = p->model;
    if (m->tied_first < 0) return NULL;
    return l == m->tied_first ? p->src.tied_grad[0] : l == m->tied_last ? p->src.tied_grad[1] : NULL;
}

// A streamed stage's copy of the tied embedding whose op-U gradient waits on flash
// (LayerSource.tied_spill): its region of the spill file, or -1.
int tied_region(const Pipeline *p, int l) {
    const Model *m = p->model;
    if (!p->src.tied_spill || m->tied_first < 0 || !layers_held(p, l)) return -1;
    return l == m->tied_first ? 0 : l == m->tied_last ? 1 : -1;
}

// A tied copy whose op-U gradient is kept apart from the layer source (memory or flash).
int tied_apart(const Pipeline *p, int l) {
    return tied_buffer(p, l) || tied_region(p, l) >= 0;
}

int tied_takes_head(const Pipeline *p, int l) {
    return p->src.tied_once && l == p->model->tied_first && p->stage.plan[l].trains;
}

// A spilled tied copy's gradient (of the slot's rows) into the layer-sized buffer (the
// estimate's, fg and fg+bp), where op U finds it.
int tied_fetch(Pipeline *p, int l, const LayerSlot *s, FgError *err) {
    int r = tied_region(p, l);
    if (r < 0) return FG_OK;
    return p->src.tied_spill->read(p->src.tied_spill, r, s->first, p->src.layer_buffer, s->count, err);
}

// g, a tied copy's op-U gradient of the slot's rows, onto flash (nothing when it is kept in
// memory).
int tied_keep(Pipeline *p, int l, const LayerSlot *s, const float *g, FgError *err) {
    int r = tied_region(p, l);
    if (r < 0) return FG_OK;
    return p->src.tied_spill->write(p->src.tied_spill, r, s->first, g, s->count, err);
}

// The tied copies kept once (bp, LayerSource.tied_once): the head's gradient, kept apart since
// its wave, added into the embedding's, the sum tie_pieces forms (x + 1 y), over the slot's rows
// of the table (the embedding's first vocab x C floats; the GPT's positions follow).
int tied_add_head_gradient(Pipeline *p, LayerSlot *s, FgError *err) {
    const Backend *be = p->be;
    int last = p->model->tied_last, r = tied_region(p, last);
    size_t table = p->model->layers[last].param_count;
    size_t n = s->first < table ? FG_MIN(s->count, table - s->first) : 0;
    if (r < 0) {
        if (n) be->axpy(be, s->grad, 1.0f, tied_buffer(p, last) + s->first, n);
        return FG_OK;
    }
    float *piece = backend_alloc_floats(be, TIE_PIECE);
    int rc = FG_OK;
    for (size_t o = 0; o < n && !rc; o += TIE_PIECE) {
        size_t k = FG_MIN((size_t)TIE_PIECE, n - o);
        if (!(rc = p->src.tied_spill->read(p->src.tied_spill, r, s->first + o, piece, k, err)))
            be->axpy(be, s->grad + o, 1.0f, piece, k);
    }
    be->free(be, piece);
    return rc;
}

// Piece [o, o + k) of tied copy l's gradient: at g + o in memory, or read from flash into buf.
static int tie_piece(Pipeline *p, int l, float *g, float *buf, size_t o, size_t k, float **out,
                     FgError *err) {
    int r = tied_region(p, l);
    *out = r < 0 ? g + o : buf;
    return r < 0 ? FG_OK : p->src.tied_spill->read(p->src.tied_spill, r, o, buf, k, err);
}

// The sum x += y (y: the other copy, here or on the other end stage), then y = x, a piece at a
// time: the same bits as whole (elementwise), and no copy needs a second table-sized buffer.
int tied_sum_pieces(Pipeline *p, int mine, float *x, float *y, int both, FgError *err) {
    const Backend *be = p->be;
    const Model *m = p->model;
    size_t n = m->layers[m->tied_last].param_count;
    float *bx = backend_alloc_floats(be, TIE_PIECE), *by = backend_alloc_floats(be, TIE_PIECE);
    int other = mine == m->tied_first ? p->tr->stages - 1 : 0, tag = message_tag(MSG_TIED, 0, 0), h;
    int rc = FG_OK;
    for (size_t o = 0; o < n && !rc; o += TIE_PIECE) {
        size_t k = FG_MIN((size_t)TIE_PIECE, n - o);
        float *xk, *yk = by;
        if ((rc = tie_piece(p, mine, x, bx, o, k, &xk, err))) break;
        if (both) rc = tie_piece(p, m->tied_last, y, by, o, k, &yk, err);
        // backend memory both ways: the GPU's buffers never reach the host here
        else if (!(rc = p->tr->post_recv(p->tr, other, tag, by, k * sizeof(float), &h, err)) &&
                 !(rc = p->tr->send(p->tr, other, tag, xk, k * sizeof(float), err)))
            rc = p->tr->wait_recv(p->tr, h, err);
        if (rc) break;
        be->axpy(be, xk, 1.0f, yk, k);  // x + 1 y == x + y: the same bits on every backend
        if (both) be->copy(be, yk, xk, k * sizeof(float));
        int r = tied_region(p, mine), rl = both ? tied_region(p, m->tied_last) : -1;
        if (r >= 0) rc = p->src.tied_spill->write(p->src.tied_spill, r, o, xk, k, err);
        if (!rc && rl >= 0) rc = p->src.tied_spill->write(p->src.tied_spill, rl, o, xk, k, err);
    }
    be->free(be, bx);
    be->free(be, by);
    return rc;
}
