#include "stage.h"

#include <string.h>

#include "perturbation.h"

int stage_init(Stage *st, const Backend *be, const Model *m, int first, int last, int max_rows,
               int tangents, FgError *err) {
    memset(st, 0, sizeof *st);
    st->be = be;
    if (first < 0 || last > m->n_layers || first >= last)
        return fg_fail(err, FG_ERR_INPUT, "stage: layers [%d, %d) are not a range of the %d layers",
                       first, last, m->n_layers);
    st->model = m;
    st->first = first;
    st->last = last;
    st->param_base = model_range_offset(m, first);
    st->param_count = model_range_count(m, first, last);
    st->max_rows = max_rows;
    st->tangents = tangents;
    st->plan = layer_plan_build(m);
    st->backward_first = first;
    while (first == 0 && st->backward_first < last && !st->plan[st->backward_first].trains) st->backward_first++;
    // One layer's tangents at a time, or a row block's of a table in blocks (stage_rows.c).
    if (tangents) st->pdot = backend_alloc_floats(be, (size_t)tangents * model_largest_trained_block(m, first, last));
    return FG_OK;
}

// The ping-pong buffers of whole-stage passes, made on first use: a pipeline runs its layers
// one at a time through its own buffers and never needs them.
static void whole_stage_buffers(Stage *st) {
    if (st->act[0]) return;
    size_t plane = (size_t)st->max_rows * st->model->max_width;
    for (int i = 0; i < 2; i++) {
        st->act[i] = backend_alloc_floats(st->be, plane);
        st->adj[i] = backend_alloc_floats(st->be, plane);
        if (st->tangents) st->tan[i] = backend_alloc_floats(st->be, (size_t)st->tangents * plane);
    }
}

void stage_free(Stage *st) {
    const Backend *be = st->be;
    if (!be) return;
    for (int i = 0; i < 2; i++) {
        be->free(be, st->act[i]);
        be->free(be, st->adj[i]);
        be->free(be, st->tan[i]);
    }
    be->free(be, st->pdot);
    fg_free(st->plan);
    be->free(be, st->lowrank_work);
    be->free(be, st->head_factors);
    be->free(be, st->ones);
    stage_free_local(st);
    memset(st, 0, sizeof *st);
}

// Stash layout: layer l's input at stash_at(l), the stage output at stash_at(last).
size_t stage_stash_offset(const Stage *st, int l, int rows) {
    size_t off = 0;
    for (int i = st->first; i < l; i++) off += stage_act_floats(st, i, (size_t)rows * st->model->layers[i].in);
    return off;
}

size_t stage_stash_floats(const Stage *st, int rows) {
    return stage_stash_offset(st, st->last, rows) +
           stage_act_floats(st, st->last, (size_t)rows * st->model->layers[st->last - 1].out);
}

// Layer l's input from a stash, as floats (BF16 widened into the stage's first buffer, free
// during whole-stage backward passes).
static const float *stash_input(const Stage *st, const float *stash, int l, int rows) {
    return stage_act_load(st, l, stash + stage_stash_offset(st, l, rows), st->act[0],
                          (size_t)rows * st->model->layers[l].in);
}

static const float *layer_params(const Stage *st, const float *params, const Layer *L) {
    return params + (L->param_offset - st->param_base);
}

void stage_forward(Stage *st, const float *params, const TangentKey *key, const float *x,
                   const float *xdot, int rows, float *stash, const float **y,
                   const float **ydot) {
    stage_forward_call(st, params, &(ForwardCall){.key = key}, x, xdot, rows, stash, y, ydot);
}

void stage_forward_call(Stage *st, const float *params, const ForwardCall *call, const float *x,
                        const float *xdot, int rows, float *stash, const float **y,
                        const float **ydot) {
    const Model *m = st->model;
    const TangentKey *key = call->key;
    whole_stage_buffers(st);
    if (stash) {
        stage_act_store(st, st->first, stash, x, (size_t)rows * m->layers[st->first].in);
        if (stage_act_type(st, st->first) == FG_F32) x = stash;
    }
    for (int l = st->first; l < st->last; l++) {
        const Layer *L = &m->layers[l];
        int slot = (l - st->first) & 1;
        // FP32 outputs go straight into the stash when there is one: they are the next input.
        float *kept = stash ? stash + stage_stash_offset(st, l + 1, rows) : NULL;
        float *out = stage_act_buffer(st, l + 1, kept, st->act[slot]);
        ParamTangents t = {.guide = call->guide ? layer_params(st, call->guide, L) : NULL,
                           .ref = call->ref ? layer_params(st, call->ref, L) : NULL,
                           .ref_dots = call->ref_dots};
        if (key) t.key = *key;
        stage_layer_forward(st, l, layer_params(st, params, L), NULL, key ? &t : NULL, call->head, x,
                            xdot, out, key ? st->tan[slot] : NULL, rows);
        stage_act_keep(st, l + 1, kept, out, (size_t)rows * L->out);
        x = out;
        // A local loss ends its tangent at the head (the engine's op F does the same).
        if (key) xdot = stage_local_head(st, l) ? NULL : st->tan[slot];
    }
    *y = x;
    if (ydot) *ydot = key ? xdot : NULL;
}

// A table in row blocks (Layer.block_rows) in a whole-layer call (stage_forward, the costs'
// measurement): its blocks in order, with st->pdot a block's tangents.
static void layer_forward_blocks(Stage *st, int l, const float *p, const ParamTangents *t,
                                 HeadScore *head, const float *x, const float *xdot, float *y,
                                 float *ydot, int rows) {
    const Layer *L = &st->model->layers[l];
    void *state = fg_alloc_bytes(FG_MAX(stage_rows_state_bytes(st, l, rows), 1));
    for (int b = 0; b < layer_blocks(L); b++) {
        size_t first, count;
        layer_block(L, b, &first, &count);
        ParamTangents tb = t ? *t : (ParamTangents){0};
        if (tb.ref) tb.ref += first;
        if (tb.guide) tb.guide += first;
        stage_rows_forward(st, l, p + first, first, count, t ? &tb : NULL, x, xdot,
                           head ? head->labels : NULL, y, ydot, rows, state);
    }
    stage_rows_finish(st, l, state, head, t != NULL, y, rows);  // a head scores: an embedding has no end
    fg_free(state);
}

void stage_layer_forward(Stage *st, int l, const float *p, const uint16_t *p16,
                         const ParamTangents *tangents, HeadScore *head, const float *x,
                         const float *xdot, float *y, float *ydot, int rows) {
    const Layer L = layer_with_weights16(&st->model->layers[l], p16);
    const Backend *be = st->be;
    if (layer_blocks(&L) > 1) layer_forward_blocks(st, l, p, tangents, head, x, xdot, y, ydot, rows);
    else if (st->plan[l].scores) stage_head_forward(st, l, p, p16, tangents, head, x, xdot, y, rows);
    else if (!tangents) be->forward(be, &L, p, x, y, rows);
    else if (!st->plan[l].trains) be->jvp(be, &L, p, NULL, x, xdot, y, ydot, rows, st->tangents);
    else stage_perturbation(st, l)->jvp(st, l, p, p16, tangents, x, xdot, y, ydot, rows);
    stage_round_output(st, l, y, rows);
    if (ydot) stage_act_round(st, l + 1, ydot, (size_t)st->tangents * rows * L.out);
}

void stage_backward(Stage *st, const float *params, const float *stash, const float *dy,
                    float *dx, float *grad, int rows) {
    const Model *m = st->model;
    whole_stage_buffers(st);
    for (int l = st->last - 1; l >= st->first; l--) {
        const Layer *L = &m->layers[l];
        float *dx_l = l == st->first ? dx : st->adj[(l - st->first) & 1];
        st->be->backward(st->be, L, layer_params(st, params, L), stash_input(st, stash, l, rows),
                               dy, dx_l, grad + (L->param_offset - st->param_base), rows);
        if (dx_l) stage_adjoint_round(st, l, dx_l, (size_t)rows * L->in);
        dy = dx_l;
    }
}

// Adjoints layout (op Bi to op Bw): the output adjoints [rows, out] of the layers that train
// (LayerPlan.trains: a frozen layer, a LoRA base, has no Bw), one after the other in layer
// order, each in the type of the next layer's input.
size_t stage_adjoint_offset(const Stage *st, int layer, int rows) {
    size_t off = 0;
    for (int i = st->first; i < layer; i++)
        if (st->plan[i].trains)
            off += stage_act_floats(st, i + 1, (size_t)rows * st->model->layers[i].out);
    return off;
}

size_t stage_adjoint_floats(const Stage *st, int rows) {
    return stage_adjoint_offset(st, st->last, rows);
}

// The input-adjoint half of stage_backward: the same dx GEMMs in the same order. A layer's
// input adjoint is kept in `adjoints` when the layer below trains (it is that layer's
// output adjoint, which Bw needs): made there where it is FP32, else in the ping-pong buffers.
void stage_backward_input(Stage *st, const float *params, const float *stash, const float *dy,
                          float *dx, float *adjoints, int rows) {
    const Model *m = st->model;
    const Backend *be = st->be;
    whole_stage_buffers(st);
    const Layer *top = &m->layers[st->last - 1];
    if (st->plan[st->last - 1].trains)  // the only adjoint not written by a layer of this stage
        stage_act_store(st, st->last, adjoints + stage_adjoint_offset(st, st->last - 1, rows), dy,
                        (size_t)rows * top->out);
    for (int l = st->last - 1; l >= st->backward_first; l--) {
        const Layer *L = &m->layers[l];
        float *dx_l = dx, *kept = NULL;
        if (l > st->first) {
            kept = st->plan[l - 1].trains ? adjoints + stage_adjoint_offset(st, l - 1, rows) : NULL;
            dx_l = stage_act_buffer(st, l, kept, st->adj[(l - st->first) & 1]);
        }
        be->backward(be, L, layer_params(st, params, L), stash_input(st, stash, l, rows),
                     dy, dx_l, NULL, rows);
        if (dx_l) stage_adjoint_round(st, l, dx_l, (size_t)rows * L->in);
        stage_act_keep(st, l, kept, dx_l, (size_t)rows * L->in);
        dy = dx_l;
    }
}

// The weight half: the same dW GEMMs and bias sums as stage_backward, on the same inputs (the
// adjoints Bi kept widened into the ping-pong buffers where BF16).
void stage_backward_weight(Stage *st, const float *params, const float *stash,
                           const float *adjoints, float *grad, int rows) {
    const Model *m = st->model;
    whole_stage_buffers(st);
    for (int l = st->last - 1; l >= st->backward_first; l--) {
        const Layer *L = &m->layers[l];
        if (!st->plan[l].trains) continue;
        const float *p = layer_grad_reads_params(L) ? layer_params(st, params, L) : NULL;
        const float *dy = stage_act_load(st, l + 1, adjoints + stage_adjoint_offset(st, l, rows), st->adj[0],
                                         (size_t)rows * L->out);
        st->be->backward(st->be, L, p, stash_input(st, stash, l, rows), dy, NULL,
                         grad + (L->param_offset - st->param_base), rows);
    }
}

// Visits every (layer with parameters, micro-batch, tangent) of the stage in one fixed order
// and either adds coeff * v into grad or accumulates v . x into dots (per layer: one row of
// n_mb*K per layer of the stage).
static void tangent_pass(const Stage *st, TangentKey key, int n_mb, const float *coeff,
                         float *grad, const float *x, double *dots, int per_layer) {
    int K = st->tangents;
    for (int l = st->first; l < st->last; l++) {
        const Layer *L = &st->model->layers[l];
        size_t off = L->param_offset - st->param_base;
        if (!st->plan[l].trains) continue;
        if (grad) stage_layer_add_tangents(st, l, key, n_mb, coeff, grad + off);
        else stage_layer_tangent_dots(st, l, key, n_mb, x + off,
                                      dots + (per_layer ? (size_t)(l - st->first) * n_mb * K : 0));
    }
}

void stage_add_tangents(const Stage *st, TangentKey key, int n_mb, const float *coeff,
                        float *grad) {
    tangent_pass(st, key, n_mb, coeff, grad, NULL, NULL, 0);
}

void stage_tangent_dots(const Stage *st, TangentKey key, int n_mb, const float *x, double *dots) {
    for (int i = 0; i < n_mb * st->tangents; i++) dots[i] = 0.0;
    tangent_pass(st, key, n_mb, NULL, NULL, x, dots, 0);
}

void stage_tangent_dots_by_layer(const Stage *st, TangentKey key, int n_mb, const float *x,
                                 double *dots) {
    size_t n = (size_t)(st->last - st->first) * n_mb * st->tangents;
    for (size_t i = 0; i < n; i++) dots[i] = 0.0;
    tangent_pass(st, key, n_mb, NULL, NULL, x, dots, 1);
}
