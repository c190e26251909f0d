// The resident layer source: every buffer of the stage in the backend's memory at once, each
// layer's slot a view into stage-sized buffers. Acquire and release cost nothing.
#include <stdint.h>
#include <stdlib.h>

#include "layer_plan.h"
#include "layer_source.h"
#include "mem_account.h"

typedef struct {
    const Backend *be;
    const Model *model;
    size_t base, n;        // the stage's offset in the model's flat layout, its parameters
    float *params, *state, *ref, *grad, *prev[LAYER_MAX_LAG];
    // LayerNeeds.weights16: the BF16 copy of the layers that have one (layer_has_weights16),
    // layer l's at at16[l] (SIZE_MAX: none), made from params by refresh16 alone.
    uint16_t *params16;
    size_t *at16;
    LayerPlan *plan;       // which layers train (a frozen one's earlier weights are its weights)
} Resident;

// The one writer of the BF16 copy: layer l's floats [first, first + count) were written. The
// backend rounds them where they lie (device memory on a GPU); a base kept in BF16 keeps its
// own bits, denormals too (layer_source_how16 says why).
static void refresh16(Resident *r, int l, size_t first, size_t count) {
    if (!r->params16 || r->at16[l] == SIZE_MAX) return;
    size_t off = r->model->layers[l].param_offset - r->base + first;
    const int how = layer_source_how16(&r->model->layers[l]);
    r->be->narrow16(r->be, r->params + off, r->params16 + r->at16[l] + first, count, how);
}

// Layer l's copy from its float `first` on (NULL: it has none).
static const uint16_t *copy16_at(const Resident *r, int l, size_t first) {
    return r->params16 && r->at16[l] != SIZE_MAX ? r->params16 + r->at16[l] + first : NULL;
}

// The copy's layout, sized for the stage's layers that read one, and its first values.
static void make_copy16(Resident *r, int first, int last) {
    const Model *m = r->model;
    size_t n16 = 0;
    r->at16 = malloc((size_t)m->n_layers * sizeof *r->at16);
    for (int l = 0; l < m->n_layers; l++) {
        int has = l >= first && l < last && layer_has_weights16(&m->layers[l]);
        r->at16[l] = has ? n16 : SIZE_MAX;
        if (has) n16 += m->layers[l].param_count;
    }
    r->params16 = r->be->alloc(r->be, FG_MAX(n16, 1) * sizeof(uint16_t));
    for (int l = first; l < last; l++) refresh16(r, l, 0, m->layers[l].param_count);
}

static int resident_prefetch(LayerSource *s, int layer, int block, unsigned parts, FgError *err) {
    (void)s, (void)layer, (void)block, (void)parts, (void)err;
    return FG_OK;
}

static int resident_in_slot(LayerSource *s, int layer, int block, unsigned parts) {
    (void)s, (void)layer, (void)block, (void)parts;
    return 1;
}

static float *view(float *buf, size_t off) { return buf ? buf + off : NULL; }

static int resident_acquire(LayerSource *s, int layer, int block, unsigned parts, LayerSlot *out,
                            FgError *err) {
    (void)err;
    Resident *r = s->ctx;
    *out = (LayerSlot){0};
    layer_block(&r->model->layers[layer], block, &out->first, &out->count);
    size_t off = r->model->layers[layer].param_offset - r->base + out->first;
    if (parts & LAYER_WEIGHTS) {
        out->params = r->params + off;
        out->params16 = copy16_at(r, layer, out->first);
        out->state = view(r->state, off);
        out->state_stride = r->n;
        out->ref = view(r->ref, off);
    }
    if (parts & LAYER_STEP) {
        out->grad = out->update_grad = view(r->grad, off);
        // A frozen layer's earlier weights are its weights: their copy is its copy.
        const uint16_t *p16 = r->plan[layer].trains ? NULL : copy16_at(r, layer, out->first);
        for (int j = 0; j < LAYER_MAX_LAG; j++) {
            out->prev[j] = view(r->prev[j], off);
            out->prev16[j] = out->prev[j] ? p16 : NULL;
        }
    }
    return FG_OK;
}

// Written weights refresh their BF16 copy here, whoever wrote them (the update, a checkpoint's
// load, the tied copies' sum): every writer releases them dirty before anything reads them.
static int resident_release(LayerSource *s, int layer, int block, unsigned parts, unsigned dirty,
                            FgError *err) {
    (void)parts, (void)err;
    Resident *r = s->ctx;
    if (dirty & LAYER_WEIGHTS) {
        size_t first, count;
        layer_block(&r->model->layers[layer], block, &first, &count);
        refresh16(r, layer, first, count);
    }
    return FG_OK;
}

static void resident_refresh16(LayerSource *s, int layer, int block, const LayerSlot *slot) {
    Resident *r = s->ctx;
    refresh16(r, layer, slot->first, slot->count);
    (void)block;
}

static int resident_begin_version(LayerSource *s, long next_step, FgError *err) {
    (void)s, (void)next_step, (void)err;
    return FG_OK;
}

// Every version allocated moves, also one this timetable's lags do not use: swaps are free.
static void resident_age_weights(LayerSource *s) {
    Resident *r = s->ctx;
    int n_prev = 0;
    while (n_prev < LAYER_MAX_LAG && r->prev[n_prev]) n_prev++;
    if (!n_prev) return;
    float *oldest = r->prev[n_prev - 1];
    for (int j = n_prev - 1; j > 0; j--) r->prev[j] = r->prev[j - 1];
    r->prev[0] = r->params;
    r->params = oldest;
}

static int resident_flush(LayerSource *s, FgError *err) {
    (void)s, (void)err;
    return FG_OK;
}

static void resident_report(LayerSource *s, const char *who) { (void)s, (void)who; }

static int resident_close(LayerSource *s, FgError *err) {
    (void)err;
    Resident *r = s->ctx;
    if (!r) return FG_OK;
    float *bufs[] = {r->params, r->state, r->ref, r->grad, r->prev[0], r->prev[1]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) r->be->free(r->be, bufs[i]);
    r->be->free(r->be, r->params16);
    free(r->at16);
    fg_free(r->plan);
    free(r);
    s->ctx = NULL;
    return FG_OK;
}

int layer_source_resident(const Backend *be, const Config *c, const Model *m, int first, int last,
                          LayerSource *out, FgError *err) {
    (void)err;
    LayerNeeds need = layer_needs(c);
    Resident *r = calloc(1, sizeof *r);
    r->be = be, r->model = m, r->plan = layer_plan_build(m);
    r->base = model_range_offset(m, first);
    r->n = model_range_count(m, first, last);
    r->params = backend_alloc_floats(be, r->n);
    // The host copy of the initial weights goes before the other buffers come: with them it
    // would add a copy of the weights to the stage's peak (GPT-2 124M: 0.65 GB).
    float *init = fg_alloc_floats(r->n);
    model_init_range(m, first, last, init, c->training.seed);
    be->upload(be, r->params, init, r->n * sizeof(float));
    fg_free(init);
    r->state = backend_alloc_floats(be, r->n * need.opt_buffers);
    if (need.ref) r->ref = backend_alloc_floats(be, r->n);
    if (need.grad) r->grad = backend_alloc_floats(be, r->n);
    for (int j = 0; j < need.prev; j++) r->prev[j] = backend_alloc_floats(be, r->n);
    if (need.weights16) make_copy16(r, first, last);
    *out = (LayerSource){.ctx = r, .streamed = 0, .stage_grad = r->grad,
                         .prefetch = resident_prefetch, .in_slot = resident_in_slot, .acquire = resident_acquire,
                         .release = resident_release, .refresh16 = resident_refresh16,
                         .begin_version = resident_begin_version,
                         .age_weights = resident_age_weights,
                         .flush = resident_flush, .report = resident_report, .close = resident_close};
    mem_resident_bytes(c, m, first, last, out->held);
    return FG_OK;
}
