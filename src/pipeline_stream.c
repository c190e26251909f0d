// Out-of-core stages (docs/design.md section 8, docs/out-of-core.md): the stage's parameters and
// optimizer state live in a layer store on local flash and pass through a few memory slots.
//
// A step is a forward wave (every micro-batch through layer l before layer l + 1, so each
// layer is read once per step), then, in bp and fg+bp, a backward wave in reverse layer order.
// A forward-gradient update is not applied where it is computed: its scalars are kept and the
// update is applied to each layer as the next step's forward wave reads it (the tangents are
// regenerated from the seed), so each weight byte is read once and written once per step. bp
// updates each layer in the backward wave, as soon as its gradient is complete. The numbers
// are those of pipeline.c's in-memory step, bit for bit: every update is elementwise, and
// every sum runs in the same order.
//
// Store versions count the updates applied; the record of version V says which step runs
// next on it, so a crashed run resumes from the store. The exact gradient c of fg+bp (needed
// by the next step's update) lives in a second store, rewritten every step.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"
#include "progress.h"

// The record of a store version: the step whose forward wave runs on it.
typedef struct {
    int64_t next_step;
    uint32_t seed, mode;
} StoreRecord;

struct OutOfCore {
    LayerStream layers;       // params + optimizer state, version = updates applied
    LayerStream exact;        // fg+bp with cv: c of the last step, one buffer per layer
    int with_exact;           // the exact stream is open
    int backward;             // the step has a backward wave
    long version;             // of the layer store
    int n_slots;
    size_t wave_stride;       // floats of one micro-batch's (h, hdot) in a wave buffer
    size_t adj_stride;        // floats of one micro-batch's adjoint
    float *wave[2];           // [N][wave_stride], ping-pong between layers
    float *adj[2];            // [N][adj_stride]
    float *stash[SCHED_MAX_MICROBATCHES];  // selected micro-batches: every layer's input
    float *grad;              // one layer's gradient (bp) or c (fg+bp)
    float *update;            // one layer's forward-gradient update
    int order[SCHED_MAX_MICROBATCHES], n_order;  // micro-batches of the B ops, timetable order
    // The last step's forward-gradient update, applied as the next wave reads each layer.
    int pending, pending_ref;
    long pending_step;
    double pending_lr;
    float pending_base;
    float *pending_coeff;     // [N*K]
};

static size_t largest_layer(const Pipeline *p) {
    size_t n = 0;
    for (int l = p->stage.first; l < p->stage.last; l++) n = FG_MAX(n, p->model->layers[l].param_count);
    return n;
}

static int param_layers(const Pipeline *p) {
    int n = 0;
    for (int l = p->stage.first; l < p->stage.last; l++) n += p->model->layers[l].param_count > 0;
    return n;
}

// The next layer after l (before l when going down) that has parameters, or -1.
static int next_param_layer(const Pipeline *p, int l, int dir) {
    for (l += dir; l >= p->stage.first && l < p->stage.last; l += dir)
        if (p->model->layers[l].param_count) return l;
    return -1;
}

// Optimizer state buffers in a layer view are stride floats apart (padded for direct I/O).
static void apply_optimizer(Pipeline *p, long step, double lr, const LayerView *v, const float *g) {
    OptimizerConfig oc = config_optimizer(p->cfg);
    size_t stride = (size_t)(v->buf[1] - v->buf[0]);
    p->be->optimizer_step(p->be, &oc, step, lr, v->buf[0], g, 1.0f, v->buf[1], stride, v->count);
}

// Before the first layer of a new version is written: the record of that version.
static int begin_version(Pipeline *p, long next_step, FgError *err) {
    OutOfCore *o = p->ooc;
    StoreRecord rec = {next_step, p->cfg->seed, (uint32_t)p->cfg->mode};
    int rc = o->layers.write_aux(&o->layers, o->version + 1, &rec, err);
    if (!rc) o->version++;
    return rc;
}

// g = base * c + sum coeff v regenerated for layer l, then the optimizer step on the slot.
static int apply_pending(Pipeline *p, int l, const LayerView *v, FgError *err) {
    OutOfCore *o = p->ooc;
    const Backend *be = p->be;
    size_t n = v->count;
    if (o->pending_ref) {
        LayerView c;
        int rc = o->exact.acquire(&o->exact, l, &c, err);
        if (rc) return rc;
        be->scale(be, o->update, o->pending_base, c.buf[0], n);
        if ((rc = o->exact.release(&o->exact, l, 0, err))) return rc;
    } else {
        be->zero(be, o->update, n * sizeof(float));
    }
    TangentKey key = {.seed = p->cfg->seed, .stream = STREAM_TANGENT, .step = (uint32_t)o->pending_step,
                      .layer = (uint32_t)l};
    be->tangent_axpy(be, key, all_microbatches(p), p->K, o->pending_coeff, n, o->update);
    apply_optimizer(p, o->pending_step, o->pending_lr, v, o->update);
    return FG_OK;
}

// Reads ahead the next layer of the wave (and its c when the update needs it).
static int prefetch(Pipeline *p, int l, int dir, int with_c, FgError *err) {
    OutOfCore *o = p->ooc;
    int next = next_param_layer(p, l, dir), rc = FG_OK;
    if (next < 0) return FG_OK;
    rc = o->layers.prefetch(&o->layers, next, err);
    if (!rc && with_c) rc = o->exact.prefetch(&o->exact, next, err);
    return rc;
}

static int forward_wave(Pipeline *p, long step, const size_t *order, size_t sample0,
                        double *loss_sum, FgError *err) {
    OutOfCore *o = p->ooc;
    const Backend *be = p->be;
    const Model *m = p->model;
    Stage *st = &p->stage;
    int N = p->cfg->micro_batches, B = p->cfg->micro_batch, K = p->K, rc = FG_OK;
    // Inputs: the data (stage 0) or every micro-batch's (h, hdot) from the stage before.
    for (int mb = 0; mb < N && !rc; mb++) {
        float *in = o->wave[0] + mb * o->wave_stride;
        if (p->is_first) {
            dataset_gather(p->data, order, sample0 + (size_t)mb * B, B, p->host_x, NULL);
            be->upload(be, in, p->host_x, (size_t)B * m->in_features * sizeof(float));
        } else {
            rc = p->tr->recv(p->tr, p->tr->stage - 1, tag_of(TAG_FORWARD, step, mb), in,
                             forward_msg_floats(p, st->first, B), err);
        }
    }
    if (!rc && o->pending) rc = begin_version(p, o->pending_step + 1, err);
    int cur = 0;
    for (int l = st->first; l < st->last && !rc; l++, cur ^= 1) {
        const Layer *L = &m->layers[l];
        LayerView v = {0};
        if (L->param_count) {
            if ((rc = o->layers.acquire(&o->layers, l, &v, err)) ||
                (rc = prefetch(p, l, 1, o->pending && o->pending_ref, err)))
                break;
            if (o->pending && (rc = apply_pending(p, l, &v, err))) break;
        }
        size_t in = (size_t)B * L->in, out = (size_t)B * L->out;
        for (int mb = 0; mb < N; mb++) {
            float *x = o->wave[cur] + mb * o->wave_stride, *y = o->wave[cur ^ 1] + mb * o->wave_stride;
            const float *xdot = K && !(p->is_first && l == st->first) ? x + in : NULL;
            if (o->stash[mb]) be->copy(be, o->stash[mb] + stage_stash_offset(st, l, B), x, in * sizeof(float));
            TangentKey key = {.seed = p->cfg->seed, .stream = STREAM_TANGENT, .step = (uint32_t)step,
                              .microbatch = (uint32_t)global_microbatch(p, mb)};
            stage_layer_forward(st, l, v.buf[0], K ? &key : NULL, x, xdot, y, K ? y + out : NULL, B);
        }
        if (L->param_count) rc = o->layers.release(&o->layers, l, o->pending, err);
    }
    if (rc) return rc;
    o->pending = 0;
    int last = st->last;
    size_t out = (size_t)B * m->layers[last - 1].out;
    for (int mb = 0; mb < N && !rc; mb++) {
        float *y = o->wave[cur] + mb * o->wave_stride;
        if (o->stash[mb]) be->copy(be, o->stash[mb] + stage_stash_offset(st, last, B), y, out * sizeof(float));
        if (!p->is_last)
            rc = p->tr->send(p->tr, p->tr->stage + 1, tag_of(TAG_FORWARD, step, mb), y,
                             forward_msg_floats(p, last, B), err);
        else stage_loss(p, step, mb, y, K ? y + out : NULL, order, sample0, loss_sum);
    }
    return rc;
}

// Backprop of the selected micro-batches, layer by layer from the last. bp updates each layer
// as soon as its gradient is complete; fg+bp keeps c (in the exact store) and its dot products
// with the step's tangents (the step's scalars) for the update.
static int backward_wave(Pipeline *p, long step, long total, FgError *err) {
    OutOfCore *o = p->ooc;
    const Backend *be = p->be;
    const Model *m = p->model;
    Stage *st = &p->stage;
    int B = p->cfg->micro_batch, C = m->classes, K = p->K, NK = all_microbatches(p) * K;
    int bp = p->cfg->mode == MODE_BP, rc = FG_OK;
    double *layer_dots = p->scalars + 1 + NK;
    if (!bp) memset(layer_dots, 0, (size_t)m->n_layers * NK * sizeof(double));
    for (int i = 0; i < o->n_order && !rc; i++) {
        int mb = o->order[i];
        float *dy = o->adj[0] + mb * o->adj_stride;
        size_t n = (size_t)B * m->layers[st->last - 1].out;
        if (p->is_last) be->copy(be, dy, p->dz[step & 1] + (size_t)mb * B * C, n * sizeof(float));
        else rc = p->tr->recv(p->tr, p->tr->stage + 1, tag_of(TAG_BACKWARD, step, mb), dy, n, err);
    }
    if (!rc && bp) rc = begin_version(p, step + 1, err);
    int cur = 0;
    for (int l = st->last - 1; l >= st->first && !rc; l--, cur ^= 1) {
        const Layer *L = &m->layers[l];
        LayerView v = {0};
        if (L->param_count) {
            if ((rc = o->layers.acquire(&o->layers, l, &v, err)) ||
                (rc = prefetch(p, l, -1, !bp && o->with_exact, err)))
                break;
            be->zero(be, o->grad, L->param_count * sizeof(float));
        }
        for (int i = 0; i < o->n_order; i++) {
            int mb = o->order[i];
            float *dy = o->adj[cur] + mb * o->adj_stride;
            float *dx = p->is_first && l == st->first ? NULL : o->adj[cur ^ 1] + mb * o->adj_stride;
            be->backward(be, L, v.buf[0], o->stash[mb] + stage_stash_offset(st, l, B), dy, dx, o->grad, B);
        }
        if (!L->param_count) continue;
        // The replicas' sum of the layer's gradient (bp) or c, in place.
        if (p->tr->replicas > 1 && ((rc = p->tr->start_replica_sum(p->tr, o->grad, L->param_count, err)) ||
                                    (rc = p->tr->wait_replica_sum(p->tr, err))))
            break;
        if (bp) {
            OptimizerConfig oc = config_optimizer(p->cfg);
            apply_optimizer(p, step, lr_at(&oc, step, total), &v, o->grad);
            rc = o->layers.release(&o->layers, l, 1, err);
            continue;
        }
        // fg+bp: c is kept when the estimator uses it (cv); with the plain fg estimator it is
        // computed only because the timetable's neighbours exchange adjoints.
        if ((rc = o->layers.release(&o->layers, l, 0, err)) || !o->with_exact) continue;
        // [R][L][N*K], as op U in memory: this replica's micro-batches' rows.
        TangentKey key = {.seed = p->cfg->seed, .stream = STREAM_TANGENT, .step = (uint32_t)step,
                          .microbatch = (uint32_t)global_microbatch(p, 0), .layer = (uint32_t)l};
        int N = p->cfg->micro_batches;
        be->tangent_dot(be, key, N, K, L->param_count, o->grad,
                        layer_dots + ((size_t)p->tr->replica * m->n_layers + l) * N * K);
        LayerView c;
        if ((rc = o->exact.acquire(&o->exact, l, &c, err))) break;
        be->copy(be, c.buf[0], o->grad, L->param_count * sizeof(float));
        rc = o->exact.release(&o->exact, l, 1, err);
    }
    if (rc || p->is_first) return rc;
    size_t n = (size_t)B * m->layers[st->first].in;
    for (int i = 0; i < o->n_order && !rc; i++) {
        int mb = o->order[i];
        rc = p->tr->send(p->tr, p->tr->stage - 1, tag_of(TAG_BACKWARD, step, mb),
                         o->adj[cur] + mb * o->adj_stride, n, err);
    }
    return rc;
}

// Op U of an out-of-core stage: the step's writes made durable, one sum of the scalars, and
// the update's coefficients kept for the next wave.
static int stream_update(Pipeline *p, long step, long total, FgError *err) {
    OutOfCore *o = p->ooc;
    int K = p->K, NK = all_microbatches(p) * K, L = p->model->n_layers, rc;
    // Every stage's store holds this step's version before any stage writes the next one, so
    // after a crash the stages' stores are at most one version apart (the resume goes back).
    if ((rc = o->layers.flush(&o->layers, err)) || (o->with_exact && (rc = o->exact.flush(&o->exact, err))))
        return rc;
    int use_cv = o->with_exact && o->backward;  // (no backward wave when nothing is selected)
    int n_scalars = 1 + NK + (use_cv ? L * NK : 0);
    if ((rc = p->tr->allreduce_sum_world(p->tr, p->scalars, n_scalars, err)) || !K) return rc;
    float *d = malloc((size_t)NK * sizeof(float));
    double *rdots = use_cv ? malloc((size_t)NK * sizeof(double)) : NULL;
    o->pending_base = update_coefficients(p, use_cv, 0, d, rdots);
    memcpy(o->pending_coeff, p->coeff, (size_t)NK * sizeof(float));
    free(d);
    free(rdots);
    OptimizerConfig oc = config_optimizer(p->cfg);
    o->pending = 1, o->pending_ref = use_cv, o->pending_step = step;
    o->pending_lr = lr_at(&oc, step, total);
    return FG_OK;
}

int stream_step(Pipeline *p, long step, long total, const size_t *order, size_t sample0,
                StepResult *out, FgError *err) {
    OutOfCore *o = p->ooc;
    int N = p->cfg->micro_batches, s = p->tr->stage, rc;
    double t_start = wall_seconds(), loss_sum = 0.0;
    memset(p->scalars, 0, (size_t)(1 + all_microbatches(p) * p->K) * sizeof(double));
    rc = forward_wave(p, step, order, sample0, &loss_sum, err);
    double t_forward = wall_seconds();
    if (!rc && o->backward) rc = backward_wave(p, step, total, err);
    double t_backward = wall_seconds();
    p->scalars[0] = loss_sum;
    if (!rc) rc = stream_update(p, step, total, err);
    if (!rc) rc = p->be->sync(p->be, err);
    // The measured timeline: a wave's F (B) ops drawn as equal shares of the wave.
    int first = p->sched.stage_first[s], end = first + p->sched.stage_count[s], nf = 0, nb = 0;
    for (int i = first; i < end; i++) {
        const ScheduledOp *op = &p->sched.ops[i];
        double *t = p->measured + 2 * i;
        if (op->kind == OP_F) {
            double share = (t_forward - t_start) / N;
            t[0] = nf * share, t[1] = ++nf * share;
        } else if (op->kind == OP_B) {
            double share = (t_backward - t_forward) / FG_MAX(o->n_order, 1);
            t[0] = t_forward - t_start + nb * share, t[1] = t_forward - t_start + ++nb * share;
        } else {
            t[0] = t_backward - t_start, t[1] = wall_seconds() - t_start;
        }
    }
    *out = p->stats;
    out->loss = p->scalars[0] / all_microbatches(p);
    out->seconds = wall_seconds() - t_start;
    return rc;
}

int pipeline_apply_pending(Pipeline *p, FgError *err) {
    OutOfCore *o = p->ooc;
    if (!o || !o->pending) return FG_OK;
    int rc = begin_version(p, o->pending_step + 1, err);
    for (int l = next_param_layer(p, p->stage.first - 1, 1); l >= 0 && !rc; l = next_param_layer(p, l, 1)) {
        LayerView v;
        if ((rc = o->layers.acquire(&o->layers, l, &v, err)) || (rc = prefetch(p, l, 1, o->pending_ref, err)))
            break;
        if (!(rc = apply_pending(p, l, &v, err))) rc = o->layers.release(&o->layers, l, 1, err);
    }
    o->pending = 0;
    if (!rc) rc = o->layers.flush(&o->layers, err);
    return rc;
}

int pipeline_visit_layers(Pipeline *p, int writable, long next_step, LayerVisitor visit, void *arg,
                          FgError *err) {
    OutOfCore *o = p->ooc;
    if (!o) {  // the checkpoint's buffers: params, optimizer state (n apart), guide
        float *bufs[4] = {p->host.params};
        int n = 1;
        for (int b = 0; b < optimizer_state_buffers(p->cfg->optimizer); b++)
            bufs[n++] = p->host.opt_state + b * p->n;
        if (p->guide) bufs[n++] = p->host.guide;
        return model_visit_layers(p->model, p->stage.first, p->stage.last, bufs, n, visit, arg, err);
    }
    // Writing replaces the state, so a pending update is dropped, not applied.
    int rc = writable ? (o->pending = 0, begin_version(p, next_step, err)) : pipeline_apply_pending(p, err);
    for (int l = next_param_layer(p, p->stage.first - 1, 1); l >= 0 && !rc; l = next_param_layer(p, l, 1)) {
        LayerView v;
        if ((rc = o->layers.acquire(&o->layers, l, &v, err)) || (rc = prefetch(p, l, 1, 0, err))) break;
        rc = visit(arg, &p->model->layers[l], v.buf, err);
        int rc2 = o->layers.release(&o->layers, l, writable && !rc, err);
        if (!rc) rc = rc2;
    }
    if (!rc && writable && !(rc = o->layers.flush(&o->layers, err))) p->first_step = next_step;
    return rc;
}

int stream_evaluate(Pipeline *p, const Dataset *ds, double *loss, double *acc, FgError *err) {
    OutOfCore *o = p->ooc;
    const Model *m = p->model;
    Stage *st = &p->stage;
    int rows = p->cfg->micro_batch, N = p->cfg->micro_batches, rc;
    double totals[2] = {0, 0};  // loss * rows, hits
    if ((rc = pipeline_apply_pending(p, err))) return rc;
    // Waves of N chunks of `rows` samples: the weights are read once per wave.
    size_t chunks = (ds->count + rows - 1) / rows;
    for (size_t w = 0; w < chunks && !rc; w += N) {
        int n_mb = (int)FG_MIN((size_t)N, chunks - w);
        for (int mb = 0; mb < n_mb && !rc; mb++) rc = eval_input(p, ds, w + mb, o->wave[0] + mb * o->wave_stride, err);
        int cur = 0;
        for (int l = st->first; l < st->last && !rc; l++, cur ^= 1) {
            const Layer *L = &m->layers[l];
            LayerView v = {0};
            if (L->param_count &&
                ((rc = o->layers.acquire(&o->layers, l, &v, err)) || (rc = prefetch(p, l, 1, 0, err))))
                break;
            for (int mb = 0; mb < n_mb; mb++) {
                int n = (int)FG_MIN((size_t)rows, ds->count - (w + mb) * rows);
                stage_layer_forward(st, l, v.buf[0], NULL, o->wave[cur] + mb * o->wave_stride, NULL,
                                    o->wave[cur ^ 1] + mb * o->wave_stride, NULL, n);
            }
            if (L->param_count) rc = o->layers.release(&o->layers, l, 0, err);
        }
        for (int mb = 0; mb < n_mb && !rc; mb++)
            rc = eval_output(p, ds, w + mb, o->wave[cur] + mb * o->wave_stride, totals, err);
        if (!rc) rc = p->be->sync(p->be, err);
    }
    if (!rc) rc = p->tr->allreduce_sum(p->tr, totals, 2, err);
    *loss = totals[0] / (double)ds->count;
    *acc = totals[1] / (double)ds->count;
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Set-up

// What out of core cannot do yet, named for the user.
static int check_supported(const Pipeline *p, FgError *err) {
    const Config *c = p->cfg;
    const char *why = c->lag == 1 && c->mode == MODE_FG_BP ? "lag = 1"
                    : c->estimator == ESTIMATOR_GUIDED && c->mode == MODE_FG_BP ? "estimator = guided"
                    : c->clip_norm > 0 ? "clip_norm > 0"
                    : p->be->on_device ? "device = cuda"
                    : NULL;
    if (!why) return FG_OK;
    return fg_fail(err, FG_ERR_INPUT, "stage %d does not fit mem_budget and would stream its layers "
                   "from %s, but out-of-core stages do not support %s yet", p->tr->stage,
                   c->weights_dir, why);
}

// Opens the layer store: new, or (resuming) at the newest version every stage still holds.
static int open_layers(Pipeline *p, const LayerStreams *ls, LayerStreamSpec *spec, FgError *err) {
    OutOfCore *o = p->ooc;
    int n = p->tr->stages * p->tr->replicas, me = p->tr->replica * p->tr->stages + p->tr->stage, rc;
    spec->reopen = ls->resume, spec->version = -1;
    if ((rc = ls->open(ls->arg, spec, &o->layers, err))) return rc;
    o->version = o->layers.version;
    if (!ls->resume) return FG_OK;
    // Stages (and replicas) that crashed one version apart go back to the older one.
    double *v = calloc((size_t)n, sizeof(double)), target;
    v[me] = (double)o->version;
    rc = p->tr->allreduce_sum_world(p->tr, v, n, err);
    target = v[0];
    for (int i = 1; i < n; i++) target = fmin(target, v[i]);
    free(v);
    if (!rc && (long)target != o->version) {
        if ((rc = o->layers.close(&o->layers, err))) return rc;
        spec->version = (long)target;
        if ((rc = ls->open(ls->arg, spec, &o->layers, err))) return rc;
        o->version = (long)target;
    }
    StoreRecord rec;
    if (!rc) rc = o->layers.read_aux(&o->layers, &rec, err);
    if (!rc && (rec.seed != p->cfg->seed || rec.mode != (uint32_t)p->cfg->mode))
        rc = fg_fail(err, FG_ERR_INPUT, "layer store %s/%s was written with seed %u and mode %u; "
                     "the config has seed %u and mode %d", spec->dir, spec->name, rec.seed, rec.mode,
                     p->cfg->seed, p->cfg->mode);
    if (!rc) p->first_step = (long)rec.next_step;
    return rc;
}

int stream_init(Pipeline *p, const LayerStreams *ls, FgError *err) {
    const Config *c = p->cfg;
    const Model *m = p->model;
    int N = c->micro_batches, B = c->micro_batch, K = p->K, opt = optimizer_state_buffers(c->optimizer);
    int exact = c->mode == MODE_FG_BP, backward = c->mode != MODE_FG;
    size_t n = p->n, largest = largest_layer(p), width = (size_t)m->max_width;
    if (c->mem_budget <= 0) return FG_OK;
    // In memory: params, gradient, optimizer state and c, plus the activations of in-flight
    // micro-batches (at most N stashes).
    size_t stash = stage_stash_floats(&p->stage, B) * sizeof(float);
    double in_memory = (double)n * sizeof(float) * (2 + opt + exact) + (double)N * stash;
    if (in_memory <= c->mem_budget) return FG_OK;
    if (!ls || !ls->open)
        return fg_fail(err, FG_ERR_INPUT, "stage %d needs %.0f bytes, more than mem_budget (%.0f), "
                       "and this build cannot stream layers from local flash", p->tr->stage,
                       in_memory, c->mem_budget);
    int rc = check_supported(p, err);
    if (rc) return rc;
    OutOfCore *o = p->ooc = calloc(1, sizeof *o);
    o->backward = backward;
    o->wave_stride = (size_t)B * width * (1 + K);
    o->adj_stride = (size_t)B * width;
    int n_stash = c->mode == MODE_BP ? N : exact ? (c->select >= 0 ? c->select : N) : 0;
    // What stays in memory besides the slots: waves, adjoints, stashes, a layer's gradient
    // (backward waves) and its update (forward gradients), the stage's own work buffers.
    double work = 2.0 * N * o->wave_stride * sizeof(float) +
                  (backward ? 2.0 * N * o->adj_stride * sizeof(float) : 0) + (double)n_stash * stash +
                  (double)((backward ? largest : 0) + (K ? largest : 0)) * sizeof(float) +
                  (double)(2 * (2 + K) * (size_t)B * width + K * largest) * sizeof(float);
    size_t slot = (size_t)(1 + opt) * ((largest * sizeof(float) + 4095) / 4096 * 4096);
    size_t exact_slot = exact ? (largest * sizeof(float) + 4095) / 4096 * 4096 : 0;
    double room = c->mem_budget - work;
    o->n_slots = room > 0 ? (int)FG_MIN(room / (double)(slot + exact_slot), (double)param_layers(p)) : 0;
    if (o->n_slots < 2)
        return fg_fail(err, FG_ERR_INPUT, "mem_budget %.0f bytes is too small for stage %d: its "
                       "activations need %.0f bytes and two layer slots %zu more (at least %.0f "
                       "bytes)", c->mem_budget, p->tr->stage, work, 2 * (slot + exact_slot),
                       work + 2.0 * (slot + exact_slot));
    // Replicas may share a node and its flash: each has its own store.
    char name[64], replica[24] = "";
    if (c->replicas > 1) snprintf(replica, sizeof replica, "-replica-%d", p->tr->replica);
    snprintf(name, sizeof name, "stage-%d-%d%s", p->stage.first, p->stage.last, replica);
    LayerStreamSpec spec = {.dir = c->weights_dir, .name = name, .model = m, .first = p->stage.first,
                            .last = p->stage.last, .n_bufs = 1 + opt, .aux_bytes = sizeof(StoreRecord),
                            .fill_weights = 1, .seed = c->seed, .n_slots = o->n_slots};
    if ((rc = open_layers(p, ls, &spec, err))) return rc;
    fprintf(stderr, "fgpipe: stage %d streams its layers from %s/%s.h5 through %d slots%s%s\n",
            p->tr->stage, c->weights_dir, name, o->n_slots, o->layers.note[0] ? ": " : "",
            o->layers.note);
    if (exact && c->estimator != ESTIMATOR_FG) {
        // c is rebuilt every step: a resumed run starts this store anew.
        snprintf(name, sizeof name, "exact-%d-%d%s", p->stage.first, p->stage.last, replica);
        LayerStreamSpec es = spec;
        es.n_bufs = 1, es.aux_bytes = 0, es.fill_weights = 0, es.reopen = 0, es.version = -1;
        if ((rc = ls->open(ls->arg, &es, &o->exact, err))) return rc;
        o->with_exact = 1;
    }
    for (int i = 0; i < 2; i++) {
        o->wave[i] = backend_alloc_floats(p->be, (size_t)N * o->wave_stride);
        if (backward) o->adj[i] = backend_alloc_floats(p->be, (size_t)N * o->adj_stride);
    }
    if (backward) o->grad = backend_alloc_floats(p->be, largest);
    if (K) o->update = backend_alloc_floats(p->be, largest);
    o->pending_coeff = fg_alloc_floats((size_t)all_microbatches(p) * (K ? K : 1));
    return FG_OK;
}

int stream_plan(Pipeline *p) {
    OutOfCore *o = p->ooc;
    int s = p->tr->stage, first = p->sched.stage_first[s], end = first + p->sched.stage_count[s];
    // The B ops' order decides the order of each layer's gradient sum: keep the timetable's.
    for (int i = first; i < end && o->backward; i++)
        if (p->sched.ops[i].kind == OP_B) o->order[o->n_order++] = p->sched.ops[i].microbatch;
    for (int i = 0; i < o->n_order; i++)
        o->stash[o->order[i]] = backend_alloc_floats(p->be, stage_stash_floats(&p->stage, p->cfg->micro_batch));
    if (!o->n_order) o->backward = 0;
    return FG_OK;
}

// One line per stage at the end: what its stores moved and how long compute waited for them.
static void report_io(Pipeline *p) {
    OutOfCore *o = p->ooc;
    LayerStreamStats a = {0}, b = {0};
    o->layers.stats(&o->layers, &a);
    if (o->with_exact) o->exact.stats(&o->exact, &b);
    double rb = a.read_bytes + b.read_bytes, rs = a.read_seconds + b.read_seconds;
    double wb = a.write_bytes + b.write_bytes, ws = a.write_seconds + b.write_seconds;
    char replica[24] = "";
    if (p->tr->replicas > 1) snprintf(replica, sizeof replica, " replica %d", p->tr->replica);
    fprintf(stderr, "fgpipe: stage %d%s layer I/O: read %.3f GB in %.2f s (%.2f GB/s), wrote %.3f GB "
            "in %.2f s (%.2f GB/s), I/O threads' CPU %.2f s, compute waited %.2f s for layers\n",
            p->tr->stage, replica, rb / 1e9, rs, rs > 0 ? rb / rs / 1e9 : 0.0, wb / 1e9, ws,
            ws > 0 ? wb / ws / 1e9 : 0.0, a.cpu_seconds + b.cpu_seconds, a.wait_seconds + b.wait_seconds);
}

int stream_free(Pipeline *p, FgError *err) {
    OutOfCore *o = p->ooc;
    if (!o) return FG_OK;
    const Backend *be = p->be;
    if (o->layers.stats) report_io(p);
    int rc = o->layers.close ? o->layers.close(&o->layers, err) : FG_OK;
    FgError e2 = {0};
    if (o->with_exact) o->exact.close(&o->exact, rc ? &e2 : err);
    for (int i = 0; i < 2; i++) be->free(be, o->wave[i]), be->free(be, o->adj[i]);
    for (int b = 0; b < SCHED_MAX_MICROBATCHES; b++) be->free(be, o->stash[b]);
    be->free(be, o->grad);
    be->free(be, o->update);
    fg_free(o->pending_coeff);
    free(o);
    p->ooc = NULL;
    return rc;
}
