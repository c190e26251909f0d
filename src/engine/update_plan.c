// When and where a stage's update happens, decided once at setup from where its layers live
// (the layer source: resident or streamed) and the run plan (update_plan, engine_ops.h): op U
// (pipeline_update.c) and the waves read UpdateState's fields and never ask where the layers
// live. A resident stage holds every layer's gradient and estimate at once, so op U finishes
// and applies all of them; a streamed one holds one layer at a time, so the backward wave
// finishes each layer's gradient and the next forward wave (or, for bp without clipping, the
// backward wave itself) applies each layer's update.
#include "engine_ops.h"
#include "tied_copies.h"

static int finish_now(Pipeline *p, long step, long total, int l, LayerSlot *s, unsigned *dirty,
                      FgError *err) {
    return update_finish_layer_gradient(p, step, total, l, s, 1, dirty, err);
}

static int finish_in_u(Pipeline *p, long step, long total, int l, LayerSlot *s, unsigned *dirty,
                       FgError *err) {
    (void)p, (void)step, (void)total, (void)l, (void)s, (void)dirty, (void)err;
    return FG_OK;
}

static UpdateWhen update_timing(const Pipeline *p) {
    if (!p->src.streamed) return UPDATE_IN_U;
    // bp reads no gradient after the wave that made it (no clipping): the step needs no version
    // of its own, and each layer steps in the wave.
    return !p->run.forms_estimate && !p->need.keep_grad ? UPDATE_IN_BACKWARD : UPDATE_IN_NEXT_FORWARD;
}

// Where the backward wave steps layer l it reads its optimizer state; where F dots the
// reference (cv, guided) every wave keeps it. Elsewhere it reads the parameters alone: the
// backward wave of a stage that steps in the next forward (clipped bp, fg+bp), and in bp's the
// tied head, whose gradient waits for the embedding's step. (A forward wave that applies no
// update reads them alone too: update_acquire_for_forward.)
static unsigned wave_parts(const Pipeline *p, int steps) {
    return LAYER_WEIGHTS | (steps || p->need.ref ? 0 : LAYER_PARAMS_ONLY);
}

// As update_finish_layer_gradient decides it: a tied copy's gradient waits for op U's sum
// (keep_tied_gradient) unless it is the embedding kept once.
static int steps_in_backward(const Pipeline *p, UpdateWhen when, int l) {
    int waits = !p->run.forms_estimate && tied_apart(p, l) && !tied_takes_head(p, l);
    return when == UPDATE_IN_BACKWARD && p->stage.plan[l].trains && !waits;
}

void update_plan(Pipeline *p) {
    const int streamed = p->src.streamed;
    UpdateState *u = &p->upd;
    u->when = update_timing(p);
    u->finish_in_wave = u->when == UPDATE_IN_U ? finish_in_u : finish_now;
    u->sums_layer_replicas = streamed && p->tr->replicas > 1;
    u->keeps_estimates = !streamed;
    u->saved_copies = 1 + (u->when != UPDATE_IN_U);
    u->forms_in_u = p->model->tied_first >= 0 || (p->run.saves_inputs && !streamed);
    u->layer = fg_alloc_bytes((size_t)p->model->n_layers * sizeof(UpdateLayer));
    for (int l = p->stage.first; l < p->stage.last; l++) {
        const int apart = tied_apart(p, l);
        u->layer[l] = (UpdateLayer){
            .estimate_at = streamed ? 0 : p->model->layers[l].param_offset - p->stage.param_base,
            .holds_layer = !streamed || tied_buffer(p, l) != NULL, .formed_in_u = !streamed || apart,
            .backward_parts = wave_parts(p, steps_in_backward(p, u->when, l)) | LAYER_STEP};
    }
}
