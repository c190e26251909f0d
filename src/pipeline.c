#include "pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimator.h"
#include "pipeline_internal.h"
#include "progress.h"

// ---------------------------------------------------------------------------------------------
// Partitioning

int partition_layers(const Model *m, int M, const char *boundaries, int *first, FgError *err) {
    int L = m->n_layers;
    if (M > L)
        return fg_fail(err, FG_ERR_INPUT, "stages: %d stages for a model of %d layers", M, L);
    first[0] = 0;
    first[M] = L;
    if (strcmp(boundaries, "auto") != 0) {
        const char *s = boundaries;
        for (int i = 1; i < M; i++) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || v <= first[i - 1] || v >= L || (*end && *end != ','))
                return fg_fail(err, FG_ERR_INPUT,
                               "boundaries: '%s' must list %d increasing layer indices in 1..%d "
                               "(first layer of stages 1..%d)",
                               boundaries, M - 1, L - 1, M - 1);
            first[i] = (int)v;
            s = *end ? end + 1 : end;
        }
        if (*s)
            return fg_fail(err, FG_ERR_INPUT, "boundaries: '%s' has more than %d entries",
                           boundaries, M - 1);
        return FG_OK;
    }
    // Smallest possible largest stage, by dynamic programming over cut positions; a layer's
    // cost is its parameter count plus one so that activation layers are not free.
    double cost[MODEL_MAX_LAYERS + 1] = {0};
    for (int l = 0; l < L; l++) cost[l + 1] = cost[l] + (double)m->layers[l].param_count + 1.0;
    double best[SCHED_MAX_STAGES + 1][MODEL_MAX_LAYERS + 1];
    int cut[SCHED_MAX_STAGES + 1][MODEL_MAX_LAYERS + 1];
    for (int j = 0; j <= L; j++) best[1][j] = cost[j], cut[1][j] = 0;
    // Stages start at linear layers only: an activation stays with the layer it follows.
    for (int s = 2; s <= M; s++)
        for (int j = s; j <= L; j++) {
            best[s][j] = INFINITY;
            for (int i = s - 1; i < j; i++) {
                if (m->layers[i].kind != LAYER_LINEAR) continue;
                double v = fmax(best[s - 1][i], cost[j] - cost[i]);
                if (v < best[s][j]) best[s][j] = v, cut[s][j] = i;
            }
        }
    if (!isfinite(best[M][L]))
        return fg_fail(err, FG_ERR_INPUT, "stages: %d stages, but a stage must start at a linear layer and the model has fewer (set boundaries explicitly or use fewer stages)", M);
    for (int s = M, j = L; s >= 1; s--) first[s - 1] = j = cut[s][j];
    first[0] = 0;
    return FG_OK;
}

// ---------------------------------------------------------------------------------------------
// Messages: tags name the kind, the step's parity and the micro-batch, so a stage can never
// take one micro-batch's data for another's.

int tag_of(int kind, long step, int mb) { return (kind << 13) | (int)((step & 1) << 12) | mb; }

size_t forward_msg_floats(const Pipeline *p, int layer, int rows) {
    return (size_t)rows * p->model->layers[layer].in * (1 + p->K);
}

// ---------------------------------------------------------------------------------------------
// Stashes: a stage keeps one per micro-batch it will backpropagate, from F until B. Freed
// buffers are reused, so memory grows with the number in flight, not with N.

static float *stash_take(Pipeline *p) {
    if (p->n_free_stash) return p->free_stash[--p->n_free_stash];
    p->n_stash_alloc++;
    return backend_alloc_floats(p->be, stage_stash_floats(&p->stage, p->cfg->micro_batch));
}

static void stash_give(Pipeline *p, float *s) { p->free_stash[p->n_free_stash++] = s; }

int is_selected(const Pipeline *p, int mb) { return mb < p->n_sel; }

// ---------------------------------------------------------------------------------------------
// Replicas: replica r's micro-batch mb is the step's global micro-batch r*N + mb. It names the
// tangents and the place of its scalars, so R replicas of N micro-batches compute what one
// pipeline of R*N micro-batches computes.

int global_microbatch(const Pipeline *p, int mb) {
    return p->tr->replica * p->cfg->micro_batches + mb;
}

int all_microbatches(const Pipeline *p) { return p->tr->replicas * p->cfg->micro_batches; }

// Whether global micro-batch g enters the estimate through its exact gradient (cv, lag 0:
// it is inside c) instead of its forward gradient.
static int inside_exact(const Pipeline *p, int g) {
    return p->cfg->lag == 0 && g % p->cfg->micro_batches < p->n_sel;
}

// The buffer B ops add into: the gradient (bp) or the exact gradient c (fg+bp).
static float *backward_target(const Pipeline *p) {
    return p->cfg->mode == MODE_BP ? p->grad : p->exact;
}

// ---------------------------------------------------------------------------------------------
// Ops

// Op F of micro-batch mb; `in` is the received (h, hdot) (NULL on stage 0: the data).
static int op_forward(Pipeline *p, long step, int mb, const float *in, const size_t *order,
                      size_t sample0, double *loss_sum, FgError *err) {
    const Config *c = p->cfg;
    const Backend *be = p->be;
    int B = c->micro_batch;
    const float *x = in, *xdot = NULL;
    if (p->is_first) {
        dataset_gather(p->data, order, sample0 + (size_t)mb * B, B, p->host_x, NULL);
        be->upload(be, p->x_in, p->host_x, (size_t)B * p->model->in_features * sizeof(float));
        x = p->x_in;
    } else if (p->K) {
        xdot = in + (size_t)B * p->model->layers[p->stage.first].in;
    }
    float *stash = NULL;
    if (is_selected(p, mb)) p->stash[step & 1][mb] = stash = stash_take(p);
    TangentKey key = {.seed = c->seed, .stream = STREAM_TANGENT, .step = (uint32_t)step,
                      .microbatch = (uint32_t)global_microbatch(p, mb)};
    const float *y, *ydot;
    stage_forward(&p->stage, p->params, p->K ? &key : NULL, x, xdot, B, stash, &y, &ydot);

    if (!p->is_last) {
        int out_layer = p->stage.last;  // the next stage's first layer
        size_t rows_out = (size_t)B * p->model->layers[out_layer].in;
        be->copy(be, p->msg_out, y, rows_out * sizeof(float));
        if (p->K) be->copy(be, p->msg_out + rows_out, ydot, rows_out * p->K * sizeof(float));
        return p->tr->send(p->tr, p->tr->stage + 1, tag_of(TAG_FORWARD, step, mb), p->msg_out,
                           forward_msg_floats(p, out_layer, B), err);
    }
    stage_loss(p, step, mb, y, ydot, order, sample0, loss_sum);
    return FG_OK;
}

void stage_loss(Pipeline *p, long step, int mb, const float *y, const float *ydot,
                const size_t *order, size_t sample0, double *loss_sum) {
    const Config *c = p->cfg;
    const Backend *be = p->be;
    int B = c->micro_batch, C = p->model->classes, N = c->micro_batches;
    // Labels are gathered here, not with the inputs: a wave gathers every micro-batch's
    // inputs before the first loss.
    dataset_gather(p->data, order, sample0 + (size_t)mb * B, B, NULL, p->host_labels);
    be->upload(be, p->labels, p->host_labels, (size_t)B);
    double loss;
    if (p->K) {
        float *d = p->coeff + (size_t)mb * p->K;  // scratch until the update
        loss = be->loss_jvp(be, y, ydot, p->labels, B, C, p->K, d);
        for (int k = 0; k < p->K; k++) p->scalars[1 + (size_t)global_microbatch(p, mb) * p->K + k] = d[k];
    } else {
        loss = be->loss_forward(be, y, p->labels, B, C, NULL);
    }
    if (is_selected(p, mb)) {
        // bp averages over all N micro-batches; the exact gradient c over the n_sel selected;
        // both over the R replicas too (the replica sum adds them up).
        float *dz = p->dz[step & 1] + (size_t)mb * B * C;
        be->loss_backward(be, y, p->labels, B, C, dz);
        float scale = 1.0f / (float)((c->mode == MODE_BP ? N : p->n_sel) * p->tr->replicas);
        be->scale(be, dz, scale, dz, (size_t)B * C);
    }
    *loss_sum += loss;
}

// Op B of micro-batch mb of step `step + offset` (offset -1: the previous step's, lag 1);
// `in` is the received output adjoint (NULL on the last stage: the loss gives it).
static int op_backward(Pipeline *p, long step, int offset, int mb, const float *in, FgError *err) {
    int B = p->cfg->micro_batch;
    long of_step = step + offset;
    const float *dy = p->is_last ? p->dz[of_step & 1] + (size_t)mb * B * p->model->classes : in;
    float *stash = p->stash[of_step & 1][mb];
    float *target = backward_target(p);
    // A lag-1 op differentiates at the weights its activations were computed with.
    const float *params = offset ? p->prev_params : p->params;
    float *dx = p->is_first ? NULL : p->msg_out;
    stage_backward(&p->stage, params, stash, dy, dx, target, B);
    stash_give(p, stash);
    p->stash[of_step & 1][mb] = NULL;
    if (p->is_first) return FG_OK;
    size_t n = (size_t)B * p->model->layers[p->stage.first].in;
    return p->tr->send(p->tr, p->tr->stage - 1, tag_of(TAG_BACKWARD, of_step, mb), p->msg_out, n, err);
}

// Sums per-layer rows of `width` values in layer order: the same bits on any stage layout.
void sum_layer_rows(const double *rows, int n_layers, int width, double *out) {
    for (int i = 0; i < width; i++) out[i] = 0.0;
    for (int l = 0; l < n_layers; l++)
        for (int i = 0; i < width; i++) out[i] += rows[(size_t)l * width + i];
}

// a . b over the whole model: per-layer parts summed in layer order on every stage.
static int global_dot(Pipeline *p, const float *a, const float *b, double *out, FgError *err) {
    const Model *m = p->model;
    double *norms = calloc((size_t)m->n_layers, sizeof(double));
    for (int l = p->stage.first; l < p->stage.last; l++) {
        const Layer *ly = &m->layers[l];
        size_t off = ly->param_offset - p->stage.param_base;
        if (ly->param_count) norms[l] = p->be->dot(p->be, a + off, b + off, ly->param_count);
    }
    int rc = p->tr->allreduce_sum(p->tr, norms, m->n_layers, err);
    sum_layer_rows(norms, m->n_layers, 1, out);
    free(norms);
    return rc;
}

static int global_squared_norm(Pipeline *p, const float *x, double *out, FgError *err) {
    return global_dot(p, x, x, out, err);
}

// The log's view of one update (docs/log.md): |g|, |c|, cos(g, c), cos(plain fg, c), and the
// variance reduction of cv estimated from scalars: E d^2 = |grad l_b|^2 and
// E (d - c.v)^2 = |grad l_b - c|^2 for v ~ N(0, I).
static int update_stats(Pipeline *p, long step, const float *d, const double *cdots, int have_c,
                        FgError *err) {
    StepResult *r = &p->stats;
    int N = all_microbatches(p), K = p->K, NK = N * K, rc;
    double g2, c2, gc, f2, fc;
    r->exact_norm = r->cos_estimate_exact = r->cos_fg_exact = r->variance_reduction = NAN;
    if ((rc = global_squared_norm(p, p->grad, &g2, err))) return rc;
    r->estimate_norm = sqrt(g2);
    if (!have_c) return FG_OK;
    if ((rc = global_squared_norm(p, p->exact, &c2, err)) || (rc = global_dot(p, p->grad, p->exact, &gc, err)))
        return rc;
    r->exact_norm = sqrt(c2);
    r->cos_estimate_exact = gc / sqrt(g2 * c2);
    if (K) {
        float *coeff = malloc((size_t)NK * sizeof(float));
        for (int i = 0; i < NK; i++) coeff[i] = d[i] / (float)NK;
        p->be->zero(p->be, p->scratch, p->n * sizeof(float));
        TangentKey key = {.seed = p->cfg->seed, .stream = STREAM_TANGENT, .step = (uint32_t)step};
        stage_add_tangents(&p->stage, key, N, coeff, p->scratch);
        free(coeff);
        if ((rc = global_squared_norm(p, p->scratch, &f2, err)) || (rc = global_dot(p, p->scratch, p->exact, &fc, err)))
            return rc;
        r->cos_fg_exact = fc / sqrt(f2 * c2);
    }
    if (cdots) {
        double plain = 0, corrected = 0;
        for (int i = 0; i < NK; i++) {
            if (inside_exact(p, i / K)) continue;
            plain += (double)d[i] * d[i];
            corrected += ((double)d[i] - cdots[i]) * ((double)d[i] - cdots[i]);
        }
        if (corrected > 0) r->variance_reduction = plain / corrected;
    }
    return FG_OK;
}

float update_coefficients(Pipeline *p, int use_cv, int guided, float *d, double *rdots) {
    int N = all_microbatches(p), Nr = p->cfg->micro_batches, K = p->K, NK = N * K;
    int L = p->model->n_layers;
    const double *layer_dots = p->scalars + 1 + NK;
    for (int i = 0; i < NK; i++) d[i] = (float)p->scalars[1 + i];
    for (int r = 0; rdots && r < p->tr->replicas; r++)
        sum_layer_rows(layer_dots + (size_t)r * L * Nr * K, L, Nr * K, rdots + (size_t)r * Nr * K);
    Estimator est = {use_cv ? EST_CV : guided ? EST_GUIDED : EST_FG, N, K};
    float base;
    estimator_coefficients(&est, d, rdots, p->coeff, &base);
    // With lag 0 the selected micro-batches contribute their exact gradient (inside c).
    if (use_cv)
        for (int i = 0; i < NK; i++)
            if (inside_exact(p, i / K)) p->coeff[i] = 0.0f;
    return base;
}

// Op U: one allreduce of the step's scalars, the estimate formed locally, the optimizer step.
// *waited receives the seconds spent in the allreduce waiting for the other stages: idle time,
// not work, in the measured timeline.
static int op_update(Pipeline *p, long step, long total, int have_exact, double *waited,
                     FgError *err) {
    const Config *c = p->cfg;
    const Model *m = p->model;
    const Backend *be = p->be;
    // N: the micro-batches of every replica (global indices); Nr: those of one replica.
    int N = all_microbatches(p), Nr = c->micro_batches, K = p->K, NK = N * K, L = m->n_layers, rc;
    // The reference vector r of the estimate: c itself (cv) or the unit direction of the last
    // exact gradient, which tangent 0 followed in this step's F ops (guided).
    int guided = K && c->estimator == ESTIMATOR_GUIDED && p->stage.guide;
    int use_cv = K && have_exact && (c->estimator == ESTIMATOR_CV || c->estimator == ESTIMATOR_AUTO);
    const float *ref = use_cv ? p->exact : guided ? p->guide : NULL;
    // [R][L][Nr*K]: r . v_{b,k} per replica and layer; each rank fills its own rows and the
    // sum over the grid (one contributor per entry: exact) gives every rank all of them.
    double *layer_dots = p->scalars + 1 + NK;
    TangentKey key = {.seed = c->seed, .stream = STREAM_TANGENT, .step = (uint32_t)step};
    if (ref) {
        TangentKey mine = key;
        mine.microbatch = (uint32_t)global_microbatch(p, 0);
        memset(layer_dots, 0, (size_t)L * NK * sizeof(double));
        stage_tangent_dots_by_layer(&p->stage, mine, Nr, ref,
                                    layer_dots + ((size_t)p->tr->replica * L + p->stage.first) * Nr * K);
    }
    int n_scalars = 1 + NK + (ref ? L * NK : 0);
    double t_sum = wall_seconds();
    if ((rc = p->tr->allreduce_sum_world(p->tr, p->scalars, n_scalars, err))) return rc;
    *waited = wall_seconds() - t_sum;

    if (K) {
        float *d = malloc((size_t)NK * sizeof(float));
        double *rdots = ref ? malloc((size_t)NK * sizeof(double)) : NULL;
        float base = update_coefficients(p, use_cv, guided, d, rdots);
        if (ref) be->scale(be, p->grad, base, ref, p->n);
        else be->zero(be, p->grad, p->n * sizeof(float));
        stage_add_tangents(&p->stage, key, N, p->coeff, p->grad);
        if (p->want_stats) rc = update_stats(p, step, d, use_cv ? rdots : NULL, have_exact, err);
        free(d);
        free(rdots);
        if (rc) return rc;
    } else if (p->want_stats && (rc = update_stats(p, step, NULL, NULL, 0, err))) {
        return rc;
    }
    OptimizerConfig oc = config_optimizer(c);
    float clip = 1.0f;
    if (oc.clip_norm > 0) {
        double norm2;
        if ((rc = global_squared_norm(p, p->grad, &norm2, err))) return rc;
        clip = optimizer_clip_scale(&oc, norm2);
    }
    if (p->prev_params) be->copy(be, p->prev_params, p->params, p->n * sizeof(float));
    be->optimizer_step(be, &oc, step, lr_at(&oc, step, total), p->params, p->grad, clip,
                       p->opt_state, p->n, p->n);
    if (p->guide && have_exact) {  // the next step's tangent 0: this step's c, normalised
        double norm2;
        if ((rc = global_squared_norm(p, p->exact, &norm2, err))) return rc;
        float inv = norm2 > 0 ? (float)(1.0 / sqrt(norm2)) : 0.0f;
        be->scale(be, p->guide, inv, p->exact, p->n);
        p->stage.guide = norm2 > 0 ? p->guide : NULL;
    }
    return FG_OK;
}

// Whether op runs in this step: a lag-1 B op needs the stash of the step before, which does
// not exist in the first step of a run (or of a resumed run).
static int op_runs(const Pipeline *p, long step, const ScheduledOp *op) {
    return step + op->iteration_offset >= p->first_step;
}

// The message op i of this stage's timetable waits for, if any: its source, tag and size.
static int op_receive(const Pipeline *p, long step, int i, int *from, int *tag, size_t *n) {
    const ScheduledOp *op = &p->sched.ops[i];
    int B = p->cfg->micro_batch;
    if (op->kind == OP_F && !p->is_first) {
        *from = p->tr->stage - 1;
        *tag = tag_of(TAG_FORWARD, step, op->microbatch);
        *n = forward_msg_floats(p, p->stage.first, B);
        return 1;
    }
    long of_step = step + op->iteration_offset;
    if (op->kind == OP_B && !p->is_last && op_runs(p, step, op)) {
        *from = p->tr->stage + 1;
        *tag = tag_of(TAG_BACKWARD, of_step, op->microbatch);
        *n = (size_t)B * p->model->layers[p->stage.last - 1].out;
        return 1;
    }
    return 0;
}

// Posts the receive of the first op after `after` that needs one, into msg_in[*slot];
// returns its op index (or -1).
static int post_next_receive(Pipeline *p, long step, int after, int slot, int *handle, FgError *err,
                             int *rc) {
    int s = p->tr->stage, end = p->sched.stage_first[s] + p->sched.stage_count[s], from, tag;
    size_t n;
    for (int j = after + 1; j < end; j++)
        if (op_receive(p, step, j, &from, &tag, &n)) {
            *rc = p->tr->post_recv(p->tr, from, tag, p->msg_in[slot], n, handle, err);
            return j;
        }
    return -1;
}

// The stage's last B op that runs this step (-1: none): after it the gradient buffer is
// complete and its sum over the replicas can start, to finish while the stage idles.
static int last_backward(const Pipeline *p, long step) {
    int s = p->tr->stage, first = p->sched.stage_first[s];
    for (int i = first + p->sched.stage_count[s] - 1; i >= first; i--)
        if (p->sched.ops[i].kind == OP_B && op_runs(p, step, &p->sched.ops[i])) return i;
    return -1;
}

int pipeline_step(Pipeline *p, long step, long total, const size_t *order, size_t sample0,
                  StepResult *out, FgError *err) {
    if (p->ooc) return stream_step(p, step, total, order, sample0, out, err);
    const Config *c = p->cfg;
    int N = c->micro_batches, s = p->tr->stage, rc = FG_OK;
    int first = p->sched.stage_first[s], end = first + p->sched.stage_count[s];
    int sum_after = p->tr->replicas > 1 ? last_backward(p, step) : -1;
    double t_start = wall_seconds(), loss_sum = 0.0;
    memset(p->scalars, 0, (size_t)(1 + all_microbatches(p) * p->K) * sizeof(double));
    if (c->mode == MODE_BP) p->be->zero(p->be, p->grad, p->n * sizeof(float));
    if (p->exact) p->be->zero(p->be, p->exact, p->n * sizeof(float));
    // Double-buffered receives: while op i works on one buffer, the message of the next op
    // that needs one is already posted into the other.
    int slot = 0, handle = 0;
    int posted = post_next_receive(p, step, first - 1, slot, &handle, err, &rc);
    for (int i = first; rc == FG_OK && i < end; i++) {
        const ScheduledOp *op = &p->sched.ops[i];
        const float *in = NULL;
        if (posted == i) {
            if ((rc = p->tr->wait_recv(p->tr, handle, err))) break;
            in = p->msg_in[slot];
            slot ^= 1;
            posted = post_next_receive(p, step, i, slot, &handle, err, &rc);
            if (rc) break;
        }
        double t0 = wall_seconds();  // waiting for the message above counts as idle
        if (op->kind == OP_F) {
            rc = op_forward(p, step, op->microbatch, in, order, sample0, &loss_sum, err);
        } else if (op->kind == OP_B) {
            if (!op_runs(p, step, op)) continue;
            rc = op_backward(p, step, op->iteration_offset, op->microbatch, in, err);
            if (!rc && i == sum_after)
                rc = p->tr->start_replica_sum(p->tr, backward_target(p), p->n, err);
        } else {
            // Every stage knows whether c exists this step without asking: the timetable is shared.
            int have_exact = p->n_sel > 0 && step - p->cfg->lag >= p->first_step;
            p->scalars[0] = loss_sum;
            double summed = 0.0, waited = 0.0;
            if (sum_after >= 0) {
                double t_wait = wall_seconds();
                if ((rc = p->tr->wait_replica_sum(p->tr, err))) break;
                summed = wall_seconds() - t_wait;
            }
            rc = op_update(p, step, total, have_exact, &waited, err);
            t0 += summed + waited;  // drawn after its waits, with the duration of its work
        }
        // A device queues the op's work: it ends when the device is done (and any fault in
        // it is reported here, at the op that caused it).
        if (!rc) rc = p->be->sync(p->be, err);
        p->measured[2 * i] = t0 - t_start;
        p->measured[2 * i + 1] = wall_seconds() - t_start;
    }
    *out = p->stats;
    out->loss = p->scalars[0] / (N * p->tr->replicas);
    out->seconds = wall_seconds() - t_start;
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Set-up

static ScheduleMode schedule_mode(const Config *c) {
    if (c->mode == MODE_BP) return c->schedule == SCHEDULE_1F1B ? SCHED_BP_1F1B : SCHED_BP_GPIPE;
    return c->mode == MODE_FG ? SCHED_FG : SCHED_FG_BP;
}

// Seconds for one F and one B op of this stage (best of three), to plan the timetable. An
// out-of-core stage would have to read its whole store for that: it plans with its GEMM work
// at a nominal 10 GFLOP/s instead.
static int measure_costs(Pipeline *p, double *cost_f, double *cost_b, FgError *err) {
    int B = p->cfg->micro_batch;
    if (p->ooc) {
        *cost_f = 2.0 * (double)p->n * B * (1 + p->K) / 1e10;
        *cost_b = 4.0 * (double)p->n * B / 1e10;
        return FG_OK;
    }
    const Model *m = p->model;
    const Backend *be = p->be;
    size_t in = (size_t)B * m->layers[p->stage.first].in;
    float *x = backend_alloc_floats(be, in * (1 + p->K));
    float *stash = backend_alloc_floats(be, stage_stash_floats(&p->stage, B));
    float *dy = backend_alloc_floats(be, (size_t)B * m->max_width);
    float *g = backend_alloc_floats(be, p->n);
    TangentKey key = {.seed = p->cfg->seed, .stream = STREAM_TANGENT};
    *cost_f = *cost_b = INFINITY;
    for (int r = 0; r < 3; r++) {
        const float *y, *ydot;
        double t0 = wall_seconds();
        stage_forward(&p->stage, p->params, p->K ? &key : NULL, x, p->is_first || !p->K ? NULL : x + in,
                      B, stash, &y, &ydot);
        int rc = be->sync(be, err);
        double t1 = wall_seconds();
        stage_backward(&p->stage, p->params, stash, dy, p->is_first ? NULL : x, g, B);
        if (rc || (rc = be->sync(be, err))) return rc;
        double t2 = wall_seconds();
        *cost_f = fmin(*cost_f, t1 - t0);
        *cost_b = fmin(*cost_b, t2 - t1);
    }
    be->free(be, x), be->free(be, stash), be->free(be, dy), be->free(be, g);
    return FG_OK;
}

// The stage's parameters, gradient, optimizer state (and c, lag-1 weights, guide) in memory,
// with the initial weights.
static void alloc_stage_state(Pipeline *p) {
    const Config *c = p->cfg;
    const Backend *be = p->be;
    size_t n_state = p->n * optimizer_state_buffers(c->optimizer);
    p->params = backend_alloc_floats(be, p->n);
    p->grad = backend_alloc_floats(be, p->n);
    p->opt_state = backend_alloc_floats(be, n_state);
    if (c->mode == MODE_FG_BP) p->exact = backend_alloc_floats(be, p->n);
    if (c->mode == MODE_FG_BP && c->lag == 1) p->prev_params = backend_alloc_floats(be, p->n);
    if (c->mode == MODE_FG_BP && c->estimator == ESTIMATOR_GUIDED) p->guide = backend_alloc_floats(be, p->n);
    // Checkpoints and --save-params read host memory: the buffers themselves on the CPU,
    // copies on a device (pipeline_state_to_host).
    p->host = (HostState){p->params, p->opt_state, p->guide};
    if (be->on_device) {
        p->host.params = fg_alloc_floats(p->n);
        p->host.opt_state = fg_alloc_floats(n_state);
        if (p->guide) p->host.guide = fg_alloc_floats(p->n);
    }
    model_init_range(p->model, p->stage.first, p->stage.last, p->host.params, c->seed);
    be->upload(be, p->params, p->host.params, p->n * sizeof(float));
}

int pipeline_init(Pipeline *p, const Backend *be, const Config *c, const Model *m,
                  const int *first, Transport *t, const Dataset *train,
                  const LayerStreams *streams, FgError *err) {
    memset(p, 0, sizeof *p);
    int s = t->stage, M = t->stages, N = c->micro_batches, B = c->micro_batch, rc;
    p->be = be, p->cfg = c, p->model = m, p->tr = t, p->data = train;
    p->is_first = s == 0, p->is_last = s == M - 1;
    p->K = c->mode == MODE_BP ? 0 : c->tangents;
    if (N > SCHED_MAX_MICROBATCHES)
        return fg_fail(err, FG_ERR_INPUT, "micro_batches: %d is more than %d", N, SCHED_MAX_MICROBATCHES);
    if ((rc = stage_init(&p->stage, be, m, first[s], first[s + 1], B, p->K, err))) return rc;
    p->n = p->stage.param_count;
    if ((rc = stream_init(p, streams, err))) return rc;
    if (!p->ooc) alloc_stage_state(p);
    size_t msg = (size_t)B * m->max_width * (1 + p->K);
    p->msg_in[0] = backend_alloc_floats(be, msg);
    p->msg_in[1] = backend_alloc_floats(be, msg);
    p->msg_out = backend_alloc_floats(be, msg);
    size_t x_floats = (size_t)B * FG_MAX(m->in_features, m->max_width);  // also evaluation's
    p->x_in = backend_alloc_floats(be, x_floats);
    p->labels = be->alloc(be, (size_t)B);
    p->host_x = fg_alloc_floats(x_floats);
    p->host_labels = fg_alloc_bytes((size_t)B);
    if (p->is_last && c->mode != MODE_FG)
        for (int i = 0; i < 2; i++) p->dz[i] = backend_alloc_floats(be, (size_t)N * B * m->classes);
    p->free_stash = fg_alloc_bytes(2 * (size_t)(N + 1) * sizeof(float *));
    int NR = N * t->replicas;
    p->scalars = fg_alloc_bytes((size_t)(1 + NR * p->K * (1 + m->n_layers)) * sizeof(double));
    p->coeff = fg_alloc_floats((size_t)NR * (p->K ? p->K : 1));

    // Plan: every stage measures its own ops, one sum gives everyone every stage's costs (the
    // mean over the replicas), and the deterministic builder turns identical inputs into
    // identical timetables, on every replica.
    double *costs = calloc((size_t)3 * M, sizeof(double));
    rc = measure_costs(p, &costs[s], &costs[M + s], err);
    if (!rc) rc = t->allreduce_sum_world(t, costs, 2 * M, err);
    for (int i = 0; i < 2 * M; i++) costs[i] /= t->replicas;
    if (!rc) {
        ScheduleSpec spec = {M, N, schedule_mode(c), c->mode == MODE_FG_BP ? c->lag : 0,
                             c->select, costs, costs + M, costs + 2 * M};
        rc = schedule_build(&spec, &p->sched, err);
    }
    free(costs);
    if (rc) return rc;
    p->n_sel = c->mode == MODE_BP ? N : c->mode == MODE_FG ? 0 : p->sched.n_sel;
    if (p->ooc) stream_plan(p);
    p->measured = fg_alloc_bytes((size_t)2 * p->sched.n_ops * sizeof(double));
    p->stats.estimate_norm = p->stats.exact_norm = p->stats.cos_estimate_exact = NAN;
    p->stats.cos_fg_exact = p->stats.variance_reduction = NAN;
    return FG_OK;
}

int pipeline_free(Pipeline *p, FgError *err) {
    const Backend *be = p->be;
    if (!be) return FG_OK;
    int rc = stream_free(p, err);
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < SCHED_MAX_MICROBATCHES; b++) be->free(be, p->stash[i][b]);
    for (int i = 0; i < p->n_free_stash; i++) be->free(be, p->free_stash[i]);
    void *on_backend[] = {p->params, p->grad, p->opt_state, p->exact, p->prev_params, p->guide,
                          p->scratch, p->msg_in[0], p->msg_in[1], p->msg_out, p->x_in,
                          p->labels, p->dz[0], p->dz[1]};
    for (size_t i = 0; i < sizeof on_backend / sizeof on_backend[0]; i++) be->free(be, on_backend[i]);
    if (be->on_device) {
        fg_free(p->host.params);
        fg_free(p->host.opt_state);
        fg_free(p->host.guide);
    }
    void *on_host[] = {p->host_x, p->host_labels, p->free_stash, p->scalars, p->coeff, p->measured};
    for (size_t i = 0; i < sizeof on_host / sizeof on_host[0]; i++) fg_free(on_host[i]);
    stage_free(&p->stage);
    schedule_free(&p->sched);
    memset(p, 0, sizeof *p);
    return rc;
}

int pipeline_state_to_host(Pipeline *p, FgError *err) {
    const Backend *be = p->be;
    if (!be->on_device || p->ooc) return FG_OK;
    be->download(be, p->host.params, p->params, p->n * sizeof(float));
    be->download(be, p->host.opt_state, p->opt_state,
                 p->n * optimizer_state_buffers(p->cfg->optimizer) * sizeof(float));
    if (p->guide) be->download(be, p->host.guide, p->guide, p->n * sizeof(float));
    return be->sync(be, err);
}

int pipeline_state_from_host(Pipeline *p, FgError *err) {
    const Backend *be = p->be;
    if (!be->on_device || p->ooc) return FG_OK;
    be->upload(be, p->params, p->host.params, p->n * sizeof(float));
    be->upload(be, p->opt_state, p->host.opt_state,
               p->n * optimizer_state_buffers(p->cfg->optimizer) * sizeof(float));
    if (p->guide) be->upload(be, p->guide, p->host.guide, p->n * sizeof(float));
    return be->sync(be, err);
}

int eval_input(Pipeline *p, const Dataset *ds, size_t chunk, float *x, FgError *err) {
    int rows = p->cfg->micro_batch, n = (int)FG_MIN((size_t)rows, ds->count - chunk * rows);
    if (p->is_first) {
        p->be->upload(p->be, x, ds->x + chunk * rows * ds->features, (size_t)n * ds->features * sizeof(float));
        return FG_OK;
    }
    return p->tr->recv(p->tr, p->tr->stage - 1, tag_of(TAG_EVAL, 0, (int)(chunk % 4096)), x,
                       (size_t)n * p->model->layers[p->stage.first].in, err);
}

int eval_output(Pipeline *p, const Dataset *ds, size_t chunk, const float *y, double *totals,
                FgError *err) {
    int rows = p->cfg->micro_batch, n = (int)FG_MIN((size_t)rows, ds->count - chunk * rows), correct;
    if (!p->is_last)
        return p->tr->send(p->tr, p->tr->stage + 1, tag_of(TAG_EVAL, 0, (int)(chunk % 4096)), y,
                           (size_t)n * p->model->layers[p->stage.last - 1].out, err);
    p->be->upload(p->be, p->labels, ds->labels + chunk * rows, (size_t)n);
    totals[0] += (double)p->be->loss_forward(p->be, y, p->labels, n, p->model->classes, &correct) * n;
    totals[1] += correct;
    return FG_OK;
}

int pipeline_evaluate(Pipeline *p, const Dataset *ds, double *loss, double *acc, FgError *err) {
    if (p->ooc) return stream_evaluate(p, ds, loss, acc, err);
    int rows = p->cfg->micro_batch, rc = FG_OK;
    double totals[2] = {0, 0};  // loss * rows, hits
    size_t chunks = (ds->count + rows - 1) / rows;
    for (size_t i = 0; rc == FG_OK && i < chunks; i++) {
        int n = (int)FG_MIN((size_t)rows, ds->count - i * rows);
        const float *y;
        if ((rc = eval_input(p, ds, i, p->x_in, err))) break;
        stage_forward(&p->stage, p->params, NULL, p->x_in, NULL, n, NULL, &y, NULL);
        if (!(rc = eval_output(p, ds, i, y, totals, err))) rc = p->be->sync(p->be, err);
    }
    if (!rc) rc = p->tr->allreduce_sum(p->tr, totals, 2, err);
    *loss = totals[0] / (double)ds->count;
    *acc = totals[1] / (double)ds->count;
    return rc;
}
