// Op U of the step engine: one sum of the step's scalars over the grid, the estimate's
// coefficients, clipping and the log's statistics, and the optimizer step, layer by layer.
//
// Everything here works on one layer at a time through the layer source, so a resident and a
// streamed stage share it: a resident stage applies the update at once; a streamed one keeps it
// pending and applies it as the next forward wave reads each layer (the tangents are
// regenerated from the seed), so each weight byte is read and written once per step. Every sum
// over layers runs in layer order: the same bits on any layout and either source.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "estimator.h"
#include "engine_ops.h"
#include "progress.h"
#include "tied_copies.h"

size_t scalars_d(const Pipeline *p) { (void)p; return 1; }

size_t scalars_ref_dots(const Pipeline *p) {
    return scalars_d(p) + (size_t)p->run.all_microbatches * p->run.d_per_microbatch;
}

size_t scalars_grad_norms(const Pipeline *p) {
    return scalars_ref_dots(p) + (size_t)p->model->n_layers * p->run.all_microbatches * p->K;
}

size_t scalars_not_finite(const Pipeline *p) { return scalars_grad_norms(p) + (size_t)p->model->n_layers; }

// Once before op U's sum over the grid and once at the step's end, where the step waits for
// its results anyway: a device counts without the host waiting per layer.
void pipeline_read_not_finite(Pipeline *p) {
    if (!p->stage.not_finite) return;
    const size_t n = 2 * (size_t)p->model->n_layers;
    double *to = p->scalars + scalars_not_finite(p);
    p->be->download(p->be, p->not_finite_read, p->stage.not_finite, n * sizeof(double));
    p->be->zero(p->be, p->stage.not_finite, n * sizeof(double));
    for (size_t i = 0; i < n; i++) to[i] += p->not_finite_read[i];
}

static int update_in_backward(const Pipeline *p) { return p->upd.when == UPDATE_IN_BACKWARD; }

// Whether op U needs |grad_l|^2 (a pass over the gradient): to clip bp's gradient, for the
// guide's scale and for the log's |c| or |g|.
static int needs_grad_norms(const Pipeline *p) {
    return p->run.clips_gradient || p->run.guided || p->upd.want_stats;
}

// Whether applying the update reads the step's update_grad.
static int reads_update_grad(const PendingUpdate *u) {
    return !u->tangents || u->base_grad != 0.0f || u->set_ref;
}

// Sums per-layer rows of `width` values in layer order, each weighted by weights[l] (NULL: 1;
// 1 * x is x, so the same bits as no weight): the same bits on any stage layout.
static void sum_layer_rows(const double *rows, const float *weights, int n_layers, int width,
                           double *out) {
    for (int i = 0; i < width; i++) out[i] = 0.0;
    for (int l = 0; l < n_layers; l++) {
        double w = weights ? weights[l] : 1.0;
        for (int i = 0; i < width; i++) out[i] += w * rows[(size_t)l * width + i];
    }
}

float *update_estimate_of_layer(Pipeline *p, int l) {
    float *tied = tied_buffer(p, l);
    return tied ? tied : p->upd.estimate + p->upd.layer[l].estimate_at;
}

// The slot's rows of layer l's estimate: where the buffer holds the whole layer, from the
// slot's first row on; else (one layer buffer of a streamed stage) it holds the slot's rows.
static float *estimate_rows(Pipeline *p, int l, const LayerSlot *s) {
    float *e = update_estimate_of_layer(p, l);
    return p->upd.layer[l].holds_layer ? e + s->first : e;
}

// Whether layer l's estimate is in update_estimate_of_layer already: a resident stage's once op
// U formed them all; a streamed stage forms each as it applies it, except the tied copies, formed (and
// summed) in op U.
static int estimate_formed(const Pipeline *p, int l) {
    return p->upd.pending.formed || tied_apart(p, l);
}

// Where op U's gradient of layer l is: the estimate (fg, fg+bp) or bp's gradient.
static float *gradient_of_layer(Pipeline *p, int l, LayerSlot *s) {
    float *tied = tied_buffer(p, l);
    if (tied_region(p, l) >= 0) return p->src.layer_buffer;  // tied_fetch put it there
    return tied ? tied + s->first : p->upd.pending.tangents ? estimate_rows(p, l, s) : s->update_grad;
}

// A frozen layer (config freeze, a LoRA base) takes no step: its weights stay bit for bit (its
// optimizer state stays 0). Resident, its weight versions age like every other layer's (one
// swap for the stage), and its weights are copied back from the swapped-out buffer; streamed,
// it is read-only: its earlier weights are its weights, and nothing of it is written back (no
// optimizer state, no reference in its slot).
static int layer_trains(const Pipeline *p, int l) { return p->stage.plan[l].trains; }

int update_acquire_for_forward(Pipeline *p, int l, int b, int next_block, LayerSlot *s, unsigned *parts,
                               unsigned *dirty, FgError *err) {
    const PendingUpdate *u = &p->upd.pending;
    int reads_step = u->active && (reads_update_grad(u) || p->tt.old_versions > 0);
    // A wave that applies no update reads the parameters alone (their reference too where F
    // dots it): a streamed layer's optimizer state stays on flash.
    *parts = LAYER_WEIGHTS | (u->active || p->need.ref ? 0 : LAYER_PARAMS_ONLY) | (reads_step ? LAYER_STEP : 0);
    *dirty = 0;
    int rc = layers_acquire_block_then(p, l, b, next_block, 1, *parts, s, err);
    if (rc || !u->active) return rc;
    if (layers_writes(p)) {
        if ((rc = tied_fetch(p, l, s, err))) return rc;
        *dirty = update_apply(p, l, s);
        // The wave reads the new weights before the release that would refresh their copy.
        if (*dirty & LAYER_WEIGHTS) p->src.refresh16(&p->src, l, b, s);
    }
    return layers_sync(p, err);  // replicas sharing the slot read it once it is updated
}

// bp: a tied copy's gradient waits apart (memory or flash) for its sum with the other's (op U):
// *waits. Kept once, the embedding, the copy the backward wave reaches last, takes the head's
// gradient and steps as the other layers do; op U has nothing left to do for them.
static int keep_tied_gradient(Pipeline *p, int l, LayerSlot *s, int fresh, int *waits, FgError *err) {
    *waits = !p->run.forms_estimate && tied_apart(p, l);
    if (fresh && tied_takes_head(p, l)) {
        *waits = 0;
        return tied_add_head_gradient(p, s, err);
    }
    if (!fresh || !*waits) return FG_OK;
    float *copy = tied_buffer(p, l);
    if (copy) p->be->copy(p->be, copy + s->first, s->grad, s->count * sizeof(float));
    return tied_keep(p, l, s, s->grad, err);
}

int update_finish_layer_gradient(Pipeline *p, long step, long total, int l, LayerSlot *s, int fresh,
                                 unsigned *dirty, FgError *err) {
    const Backend *be = p->be;
    size_t n = s->count;  // the layer, or a row block of it
    int rc;
    // A frozen layer has no gradient (a streamed stage's gradient buffer holds its largest
    // trained layer's): only the replicas' sync before its slot is reused.
    if (!layer_trains(p, l)) return fresh ? layers_sync(p, err) : FG_OK;
    if (fresh && p->upd.sums_layer_replicas &&
        ((rc = p->tr->start_replica_sum(p->tr, s->grad, n, err)) || (rc = p->tr->wait_replica_sum(p->tr, err))))
        return rc;
    // fg+bp auto: c is the mean of the stage's corrections; the scale rides on c's readers
    // (a pass over the stage's weights saved). Elsewhere the corrections are fixed (bp: all N).
    if (fresh)
        p->upd.c_scale = pipeline_fixed_corrections(p) ? 1.0f : 1.0f / (float)p->upd.weight_lanes;
    // Replicas sharing the slot: the I/O rank writes it once every one is done reading it.
    if (fresh && (rc = layers_sync(p, err))) return rc;
    int writes = layers_writes(p);
    if (fresh && s->update_grad != s->grad && s->update_grad && writes) {
        be->copy(be, s->update_grad, s->grad, n * sizeof(float));
        *dirty |= LAYER_STEP;
    }
    // Replicas hold the same sum: one of them contributes its norm to the grid's sum. A layer
    // in row blocks sums its blocks' dots in order, resident or streamed (the same bits).
    if (p->tr->replica == 0 && needs_grad_norms(p)) {
        double g2 = (double)p->upd.c_scale * p->upd.c_scale * be->dot(be, s->update_grad, s->update_grad, n);
        double *norm = &p->scalars[scalars_grad_norms(p) + l];
        *norm = s->first ? *norm + g2 : g2;
    }
    int tied = 0;
    if ((rc = keep_tied_gradient(p, l, s, fresh, &tied, err))) return rc;
    if (update_in_backward(p) && !tied && writes && layer_trains(p, l)) {  // bp without clipping
        OptimizerConfig oc = config_optimizer(p->cfg);
        be->optimizer_step(be, &oc, step, lr_at(&oc, step, total), s->params, s->params, s->grad,
                           1.0f, s->state, s->state_stride, n);
        *dirty |= LAYER_WEIGHTS;
    }
    return FG_OK;
}

// upd = (or, adding, +=) base_grad * update_grad + base_ref * ref of layer l (of the slot's rows).
static void add_base_terms(Pipeline *p, int l, const LayerSlot *s, float *upd, int adding) {
    const PendingUpdate *u = &p->upd.pending;
    const Backend *be = p->be;
    size_t n = s->count;
    float base_ref = u->base_ref * (u->ref_beta ? u->ref_beta[l] : 1.0f);
    if (!s->ref) base_ref = 0.0f;  // a streamed frozen layer (its reference would be 0)
    if (u->base_grad != 0.0f) {
        if (adding) be->axpy(be, upd, u->base_grad * p->upd.c_scale, s->update_grad, n);
        else be->scale(be, upd, u->base_grad * p->upd.c_scale, s->update_grad, n);
        adding = 1;
    }
    if (base_ref != 0.0f) {
        if (adding) be->axpy(be, upd, base_ref, s->ref, n);
        else be->scale(be, upd, base_ref, s->ref, n);
        adding = 1;
    }
    if (!adding) be->zero(be, upd, n * sizeof(float));
}

// g = base_grad * update_grad + base_ref * ref + sum coeff v for layer l, into upd. A perturbation
// that sets the estimate (local losses: folded in op F) goes first, the other terms after it.
static void form_estimate(Pipeline *p, int l, const LayerSlot *s, float *upd) {
    const PendingUpdate *u = &p->upd.pending;
    const PerturbationOps *perturb = stage_perturbation(&p->stage, l);
    int fg_part = layer_trains(p, l) && u->coeff_nonzero;  // frozen: steps of size 0
    if (!fg_part || !perturb->sets_estimate) add_base_terms(p, l, s, upd, 0);
    if (!fg_part) return;
    PerturbEstimate e = {.seed = p->cfg->training.seed, .step = u->step,
                         .first_microbatch = pipeline_global_microbatch(p, 0),
                         .replica_microbatches = p->cfg->training.micro_batches,
                         .all_microbatches = p->run.all_microbatches, .rows = p->cfg->training.micro_batch,
                         .coeff = u->coeff, .fg_weight = u->fg_weight, .work = p->saved.work,
                         .widened = p->saved.widened, .first = s->first, .count = s->count,
                         .saved = p->run.saves_inputs ? layers_saved(p, u->step, l) : NULL};
    perturb->estimate(&p->stage, l, &e, upd);
    if (perturb->sets_estimate) add_base_terms(p, l, s, upd, 1);
}

// The estimates formed in op U: every layer's on a resident stage, under activity perturbation
// so that replicas (each with the layer inputs of its own micro-batches) can sum them, and for a
// tied embedding so that its copies can be summed before either is applied; a streamed stage's
// tied copies alone (its other layers form theirs as they apply them).
static int form_all_estimates(Pipeline *p, FgError *err) {
    int rc = FG_OK;
    // The weights' part holds the reference (mix).
    unsigned parts = LAYER_STEP | (p->upd.pending.base_ref != 0.0f ? LAYER_WEIGHTS : 0);
    for (int l = layers_first_param(p); l >= 0 && !rc; l = layers_next_param(p, l, 1)) {
        if (!p->upd.layer[l].formed_in_u) continue;
        for (int b = 0; b < layer_blocks(&p->model->layers[l]) && !rc; b++) {
            LayerSlot s;
            if ((rc = layers_acquire_block(p, l, b, 1, parts, &s, err))) break;
            form_estimate(p, l, &s, estimate_rows(p, l, &s));
            rc = tied_keep(p, l, &s, estimate_rows(p, l, &s), err);
            int rc2 = layers_release_block(p, l, b, parts, 0, err);
            rc = rc ? rc : rc2;
        }
    }
    if (!rc && p->run.saves_inputs && p->tr->replicas > 1 &&
        !(rc = p->tr->start_replica_sum(p->tr, p->upd.estimate, p->n, err)))
        rc = p->tr->wait_replica_sum(p->tr, err);
    p->upd.pending.formed = p->upd.keeps_estimates;
    return rc;
}

// The GPT's tied token embedding (docs/gpt.md): wte, the first vocab x C floats of the
// embedding layer (first stage), and lm_head.weight (last stage) are two copies that start
// equal. Each gets the sum of both gradients or estimates, so they stay equal bit for bit
// (a + b == b + a), whether one stage holds both or the end stages swap theirs. A resident
// stage sums them in its gradient or update buffer, a streamed one in LayerSource.tied_grad or
// in its spill file.
static int tie_copies(Pipeline *p, FgError *err) {
    const Model *m = p->model;
    int first = m->tied_first, last = m->tied_last, rc;
    if (first < 0 || !(layers_held(p, first) || layers_held(p, last))) return FG_OK;
    int mine = layers_held(p, first) ? first : last, both = layers_held(p, first) && layers_held(p, last);
    // A frozen table (a LoRA base; both copies are, train.c) takes no step: nothing to sum,
    // nothing to write.
    if (!layer_trains(p, mine)) return FG_OK;
    // bp's gradient of a resident stage is in the step part; tied_grad and the spill need no
    // layer read.
    // Block 0 of a copy in row blocks: its pointers are where the layer starts (a resident
    // stage's buffers are contiguous; a streamed one acquires no part here).
    unsigned parts = tied_apart(p, mine) ? 0 : LAYER_STEP;
    LayerSlot a, b;
    if ((rc = layers_acquire_block(p, mine, 0, 1, parts, &a, err))) return rc;
    if (both && !(rc = layers_acquire_block(p, last, 0, 1, parts, &b, err))) {
        rc = tied_sum_pieces(p, first, gradient_of_layer(p, first, &a), gradient_of_layer(p, last, &b), 1, err);
        int rc2 = layers_release_block(p, last, 0, parts, parts, err);
        rc = rc ? rc : rc2;
    } else if (!both) {
        rc = tied_sum_pieces(p, mine, gradient_of_layer(p, mine, &a), NULL, 0, err);
    }
    int rc2 = layers_release_block(p, mine, 0, parts, parts, err);
    return rc ? rc : rc2;
}

// bp's tied copies are summed as soon as the gradients are complete, before op U's flush: a
// streamed stage that steps its layers in the backward wave (update_in_backward) steps the
// copies, which waited for the sum, here, in the version that wave wrote.
static int tie_gradients(Pipeline *p, FgError *err) {
    if (p->src.tied_once) return FG_OK;  // summed and stepped in the backward wave
    const Model *m = p->model;
    int rc = tie_copies(p, err), tied[2] = {m->tied_first, m->tied_last};
    for (int i = 0; i < 2 && !rc && update_in_backward(p); i++) {
        if (!tied_apart(p, tied[i])) continue;
        for (int b = 0; b < layer_blocks(&m->layers[tied[i]]) && !rc; b++) {
            LayerSlot s;
            if ((rc = layers_acquire_block(p, tied[i], b, 1, LAYER_WEIGHTS, &s, err)) ||
                (rc = tied_fetch(p, tied[i], &s, err)))
                break;
            rc = layers_release_block(p, tied[i], b, LAYER_WEIGHTS,
                                      layers_writes(p) ? update_apply(p, tied[i], &s) : 0, err);
        }
    }
    return rc;
}

unsigned update_apply(Pipeline *p, int l, LayerSlot *s) {
    const PendingUpdate *u = &p->upd.pending;
    const Backend *be = p->be;
    size_t n = s->count;  // the layer, or a row block of it (bp: its tangents are not in blocks)
    unsigned dirty = LAYER_WEIGHTS;
    if (!layer_trains(p, l)) {  // frozen; resident: the swap left its weights in prev[0], and they stay
        if (u->aged) be->copy(be, s->params, s->prev[0], n * sizeof(float));
        return 0;
    }
    for (int j = p->tt.old_versions - 1; j >= 0 && !u->aged; j--) {  // the step's weights age by one
        be->copy(be, s->prev[j], j ? s->prev[j - 1] : s->params, n * sizeof(float));
        dirty |= LAYER_STEP;
    }
    float *g = gradient_of_layer(p, l, s);
    if (u->tangents && !estimate_formed(p, l)) form_estimate(p, l, s, g);
    OptimizerConfig oc = config_optimizer(p->cfg);
    be->optimizer_step(be, &oc, u->step, u->lr, s->params, u->aged ? s->prev[0] : s->params, g,
                       u->clip, s->state, s->state_stride, n);
    // The next step's reference: this step's c (guided: normalised).
    if (u->set_ref) be->scale(be, s->ref, u->ref_scale * p->upd.c_scale, s->update_grad, n);
    return dirty;
}

// The stage's gradient for op U (update_finish_layer_gradient on every layer). A resident stage's
// fresh gradient is finished here, once the sum over the replicas (started after the last B op,
// to run while the stage idles) is in.
static int finish_stage_gradient(Pipeline *p, long step, long total, int fresh, double *waited,
                                 FgError *err) {
    int rc;
    if (fresh && p->tr->replicas > 1) {
        double t = wall_seconds();
        if ((rc = p->tr->wait_replica_sum(p->tr, err))) return rc;
        *waited += wall_seconds() - t;
    }
    for (int l = layers_first_param(p); l >= 0; l = layers_next_param(p, l, 1))
        for (int b = 0; b < layer_blocks(&p->model->layers[l]); b++) {
            LayerSlot s;
            unsigned dirty = 0;
            if ((rc = layers_acquire_block(p, l, b, 1, LAYER_STEP, &s, err)) ||
                (rc = update_finish_layer_gradient(p, step, total, l, &s, fresh, &dirty, err)) ||
                (rc = layers_release_block(p, l, b, LAYER_STEP, dirty, err)))
                return rc;
        }
    return FG_OK;
}

// The estimate's coefficients from the summed scalars, into the pending update. The
// reference's dots with the tangents were taken in op F; cv's estimate is
// ref + (1/N) sum_b (d_b - ref.v_b) v_b, unbiased because the reference (the last step's c)
// does not depend on this step's tangents; so is ref's scale per layer (cv_scale = auto), set
// from earlier steps' scalars before this step's join them.
static void plan_estimate(Pipeline *p, EstimatorKind kind, int have_c, float *d, double *rdots) {
    int N = p->run.all_microbatches, Nr = p->cfg->training.micro_batches, K = p->K, NK = N * K, inside = 0;
    int L = p->model->n_layers, n_d = N * p->run.d_per_microbatch;
    PendingUpdate *u = &p->upd.pending;
    const double *layer_dots = p->scalars + scalars_ref_dots(p);
    const EstimatorInfo *info = estimator_info(kind);
    int dotted = info->dots_reference;
    u->ref_beta = p->upd.cv.beta;  // cv_scale = auto (cv only), else NULL
    if (u->ref_beta) cv_scale_set_betas(&p->upd.cv);
    for (int i = 0; i < n_d; i++) d[i] = (float)p->scalars[scalars_d(p) + i];
    for (int r = 0; dotted && r < p->tr->replicas; r++)
        sum_layer_rows(layer_dots + (size_t)r * L * Nr * K, u->ref_beta, L, Nr * K,
                       rdots + (size_t)r * Nr * K);
    // Activity: a d per sample, each estimating its own loss's gradient: the mean over the
    // step's N * B samples (and K tangents) is the plain fg coefficient over N * B "micro-batches".
    // Without tangents (mix at shrink 0) the estimate is c alone: no derivatives to weigh.
    Estimator est = {kind, K ? n_d / K : 0, K, p->run.shrink};
    float base;
    estimator_coefficients(&est, d, dotted ? rdots : NULL, u->coeff, &base);
    u->fg_weight = info->base_is_c ? est.shrink : 1.0f;  // mix weighs fg itself by s
    // Micro-batches inside this step's c contribute their exact gradient instead of their
    // estimate: c's weight is their share.
    for (int i = 0; info->drops_exact && i < NK; i++)
        if (run_plan_exact(&p->run, (i / K) % Nr)) u->coeff[i] = 0.0f, inside++;
    // The entries inside c are the first of each replica's (inside_c); their d is not estimated.
    if (u->ref_beta)
        cv_scale_observe(&p->upd.cv, d, layer_dots, p->tr->replicas, Nr * K, inside / p->tr->replicas);
    u->base_grad = NK ? (float)inside / (float)NK : 0.0f;
    u->base_ref = inside == NK ? 0.0f : base * (float)(NK - inside) / (float)NK;
    // mix takes no dot with the tangents, so its c is this step's (the newest exact gradient,
    // each part as old as its op's lag; 0 before the first): with shrink 0 the update is c.
    if (info->base_is_c) u->base_grad = have_c ? base : 0.0f, u->base_ref = 0.0f;
    u->tangents = 1;
    u->coeff_nonzero = 0;
    for (int i = 0; i < n_d && !u->coeff_nonzero; i++) u->coeff_nonzero = u->coeff[i] != 0.0f;
}

enum { ROW_G2, ROW_GC, ROW_F2, ROW_FC, ROW_WIDTH };

// The rows of one layer (or row block: its dots added to the layer's in block order) for
// norm_pass: g's |g|^2 and g . c, and the plain fg estimate f's |f|^2 and f . c.
static int norm_rows(Pipeline *p, int l, LayerSlot *s, int have_c, int with_fg, const float *fcoeff,
                     double *row, FgError *err) {
    const Backend *be = p->be;
    size_t n = s->count;
    float *upd = estimate_rows(p, l, s);
    int rc = FG_OK;
    if (!estimate_formed(p, l)) form_estimate(p, l, s, upd);
    else if ((rc = tied_fetch(p, l, s, err))) return rc;
    row[ROW_G2] += be->dot(be, upd, upd, n);  // from 0: the first block's (or layer's) dot
    if (have_c) row[ROW_GC] += p->upd.c_scale * be->dot(be, upd, s->update_grad, n);
    if (!with_fg) return FG_OK;
    // A streamed stage forms g again when it applies it: f may take its buffer, its scratch
    // (also when g, of a tied copy, is in tied_grad).
    float *f = p->upd.scratch;
    be->zero(be, f, n * sizeof(float));
    TangentKey key = tangent_key(p->cfg->training.seed, p->upd.pending.step, 0, l);
    stage_layer_add_tangents_part(&p->stage, l, key, p->run.all_microbatches, fcoeff, s->first, n, f);
    row[ROW_F2] += be->dot(be, f, f, n);
    row[ROW_FC] += p->upd.c_scale * be->dot(be, f, s->update_grad, n);
    return FG_OK;
}

// One pass over the layers for |g| (clipping, the log) and the log's cosines to c: per layer
// g (resident: held for the update), and the plain fg estimate f = sum d/(NK) v.
static int norm_pass(Pipeline *p, const float *d, int have_c, double *sums, FgError *err) {
    int L = p->model->n_layers, NK = p->run.all_microbatches * p->K, rc = FG_OK;
    // Activity: f would need the saved inputs again; the log takes g's cosine when g is fg's.
    int with_fg = p->upd.want_stats && have_c && p->K && !p->run.saves_inputs;
    double *rows = calloc((size_t)L * ROW_WIDTH, sizeof(double));
    float *fcoeff = malloc((size_t)NK * sizeof(float));
    for (int i = 0; i < NK; i++) fcoeff[i] = d[i] / (float)NK;
    // The weights only for the reference: a streamed stage reads no more than the pass uses.
    unsigned parts = LAYER_STEP | (p->upd.pending.base_ref != 0.0f ? LAYER_WEIGHTS : 0);
    for (int l = layers_first_param(p); l >= 0 && !rc; l = layers_next_param(p, l, 1))
        for (int b = 0; b < layer_blocks(&p->model->layers[l]) && !rc; b++) {
            LayerSlot s;
            if ((rc = layers_acquire_block(p, l, b, 1, parts, &s, err))) break;
            rc = norm_rows(p, l, &s, have_c, with_fg, fcoeff, rows + (size_t)l * ROW_WIDTH, err);
            int rc2 = layers_release_block(p, l, b, parts, 0, err);
            rc = rc ? rc : rc2;
        }
    if (!rc) rc = p->tr->allreduce_sum(p->tr, rows, L * ROW_WIDTH, err);
    sum_layer_rows(rows, NULL, L, ROW_WIDTH, sums);
    free(rows);
    free(fcoeff);
    p->upd.pending.formed = p->upd.keeps_estimates;
    return rc;
}

// The log's view of one update (docs/log.md); the variance reduction of cv estimated from
// scalars: E d^2 = |grad l_b|^2 and E (d - c.v)^2 = |grad l_b - c|^2 for v ~ N(0, I).
static void record_stats(Pipeline *p, const double *sums, double c2, int have_c, const float *d,
                         const double *cdots) {
    StepResult *r = &p->upd.stats;
    int K = p->K, NK = p->run.all_microbatches * K, Nr = p->cfg->training.micro_batches;
    r->estimate_norm = sqrt(sums[ROW_G2]);
    r->exact_norm = r->cos_estimate_exact = r->cos_fg_exact = r->variance_reduction = NAN;
    r->cv_beta_median = p->upd.pending.ref_beta ? cv_scale_median(&p->upd.cv) : NAN;
    if (!have_c) return;
    r->exact_norm = sqrt(c2);
    r->cos_estimate_exact = sums[ROW_GC] / sqrt(sums[ROW_G2] * c2);
    const PendingUpdate *u = &p->upd.pending;
    int g_is_fg = u->base_grad == 0.0f && u->base_ref == 0.0f;
    if (K && !p->run.saves_inputs) r->cos_fg_exact = sums[ROW_FC] / sqrt(sums[ROW_F2] * c2);
    else if (K && g_is_fg) r->cos_fg_exact = r->cos_estimate_exact;
    if (!cdots) return;
    double plain = 0, corrected = 0;
    for (int i = 0; i < NK; i++) {
        if (run_plan_exact(&p->run, (i / K) % Nr)) continue;
        plain += (double)d[i] * d[i];
        corrected += ((double)d[i] - cdots[i]) * ((double)d[i] - cdots[i]);
    }
    if (corrected > 0) r->variance_reduction = plain / corrected;
}

// bp with grad_delay = D applies the gradient of step - D, none before the run's D-th step
// (as fg+bp at lag D has no c yet, also after a resume): fg+bp's staleness with bp's gradient.
static void delay_gradient(Pipeline *p, long step) {
    const Backend *be = p->be;
    int D = p->run.grad_delay;
    size_t bytes = p->n * sizeof(float);
    be->copy(be, p->upd.delayed[step % (D + 1)], p->src.stage_grad, bytes);
    if (step - D >= p->first_step)
        be->copy(be, p->src.stage_grad, p->upd.delayed[(step - D) % (D + 1)], bytes);
    else
        be->zero(be, p->src.stage_grad, bytes);
}

static int sum_scalars(Pipeline *p, double *waited, FgError *err) {
    pipeline_read_not_finite(p);
    double t = wall_seconds();
    int rc = p->tr->allreduce_sum_world(p->tr, p->scalars, (int)(p->n_scalars + p->n_run_scalars), err);
    *waited += wall_seconds() - t;
    return rc;
}

static int apply_everywhere(Pipeline *p, FgError *err) {
    int rc = FG_OK;
    // A resident stage keeps the weights' versions by swapping buffers: no copy per step.
    p->upd.pending.aged = p->tt.old_versions > 0 && p->src.age_weights;
    if (p->upd.pending.aged) p->src.age_weights(&p->src);
    for (int l = layers_first_param(p); l >= 0 && !rc; l = layers_next_param(p, l, 1))
        for (int b = 0; b < layer_blocks(&p->model->layers[l]) && !rc; b++) {
            LayerSlot s;
            unsigned parts = LAYER_WEIGHTS | LAYER_STEP;
            if ((rc = layers_acquire_block(p, l, b, 1, parts, &s, err)) || (rc = tied_fetch(p, l, &s, err))) break;
            rc = layers_release_block(p, l, b, parts, layers_writes(p) ? update_apply(p, l, &s) : 0, err);
        }
    p->upd.pending.active = 0;
    return rc;
}

// A pending update on every layer now, in a version of its own.
static int apply_pending(Pipeline *p, FgError *err) {
    if (!p->upd.pending.active) return FG_OK;
    int rc = p->src.begin_version(&p->src, p->upd.pending.step + 1, err);
    if (!rc) rc = apply_everywhere(p, err);
    if (!rc) rc = p->src.flush(&p->src, err);
    return rc;
}

int update_at(Pipeline *p, UpdatePoint at, long step, FgError *err) {
    PendingUpdate *u = &p->upd.pending;
    switch (at) {
    case AT_FORWARD:  // the pending update is written back as the layers pass: a new version
        return u->active ? p->src.begin_version(&p->src, u->step + 1, err) : FG_OK;
    case AT_LAST_BACKWARD:
        return update_in_backward(p) ? p->src.begin_version(&p->src, step + 1, err) : FG_OK;
    case AT_U:
        return p->upd.when == UPDATE_IN_U ? apply_pending(p, err) : FG_OK;
    case AT_READ:
        return apply_pending(p, err);
    case AT_LOAD:  // writing replaces the state, so a pending update is dropped, not applied
        u->active = 0;
        return p->src.begin_version(&p->src, step, err);
    }
    return FG_OK;
}

int pipeline_apply_pending(Pipeline *p, FgError *err) { return update_at(p, AT_READ, 0, err); }

int update_op(Pipeline *p, long step, long total, double *waited, FgError *err) {
    const Config *c = p->cfg;
    int N = p->run.all_microbatches, K = p->K, L = p->model->n_layers, rc;
    int est = p->run.forms_estimate;  // else bp: the update is the gradient
    int have_c = p->run.corrects && step >= p->upd.first_c_step;
    // fg+bp: a stage without corrections this step keeps its last c, which stays its
    // reference.
    int fresh = p->upd.weight_lanes > 0;
    int finish = fresh ? p->upd.when == UPDATE_IN_U : have_c;  // else the wave finished it
    if (finish && (rc = finish_stage_gradient(p, step, total, fresh, waited, err))) return rc;
    OptimizerConfig oc = config_optimizer(c);
    PendingUpdate *u = &p->upd.pending;
    *u = (PendingUpdate){.active = !update_in_backward(p), .step = step, .lr = lr_at(&oc, step, total),
                         .clip = 1.0f, .coeff = u->coeff};
    if (!est && (rc = tie_gradients(p, err))) return rc;
    if (!est && p->run.grad_delay) delay_gradient(p, step);
    // Every stage's store holds this step's version before any stage writes the next one, so
    // after a crash the stages' stores are at most one version apart (the resume goes back).
    if ((rc = p->src.flush(&p->src, err)) || (rc = sum_scalars(p, waited, err))) return rc;
    double c2, sums[ROW_WIDTH] = {0};  // c2: |c|^2, or bp's |grad|^2
    sum_layer_rows(p->scalars + scalars_grad_norms(p), NULL, L, 1, &c2);
    // guided before its first reference: plain fg (tangent 0 was random).
    EstimatorKind kind = p->run.guided && !p->upd.ref_active ? EST_FG : p->run.estimator;
    float *d = est ? malloc((size_t)FG_MAX(N * p->run.d_per_microbatch, 1) * sizeof(float)) : NULL;
    double *rdots = est ? malloc((size_t)FG_MAX(N * K, 1) * sizeof(double)) : NULL;
    if (est) plan_estimate(p, kind, have_c, d, rdots);
    // fg, fg+bp: the tied copies' estimates are summed once formed (bp's were above).
    int tied = p->model->tied_first >= 0;
    if (est && p->upd.forms_in_u) rc = form_all_estimates(p, err);
    if (!rc && est && tied) rc = tie_copies(p, err);
    if (!rc && est && (oc.clip_norm > 0 || p->upd.want_stats)) rc = norm_pass(p, d, have_c, sums, err);
    if (!est) sums[ROW_G2] = c2;  // bp: the estimate is the gradient
    if (!rc && oc.clip_norm > 0) u->clip = optimizer_clip_scale(&oc, sums[ROW_G2]);
    if (!rc && p->upd.want_stats) record_stats(p, sums, c2, have_c, d, kind == EST_CV ? rdots : NULL);
    free(d);
    free(rdots);
    if (!rc && p->need.ref && have_c) {
        // cv: a stage whose c did not change already holds it as its reference (also the
        // one a resumed run loaded); guided renormalises every stage's part by the new |c|.
        u->set_ref = fresh || p->run.guided;
        u->ref_scale = !p->run.guided ? 1.0f : c2 > 0 ? (float)(1.0 / sqrt(c2)) : 0.0f;
        // Only the guide needs |c| (known: needs_grad_norms); cv's reference is c from here on.
        p->upd.ref_active = p->run.guided ? c2 > 0 : 1;
    }
    if (!rc) rc = update_at(p, AT_U, step, err);
    return rc;
}
