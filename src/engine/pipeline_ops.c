// Ops F and B of the step engine, run as op groups (exec_plan.h): the group's micro-batches
// ("lanes") pass through the stage's layers together, each layer acquired once for the group.
// A resident stage runs groups of one op in timetable order; a streamed one runs a forward
// wave and a backward wave, reading each layer once per wave. The numbers are the same either
// way: every layer sees its lanes in timetable order, and every update is elementwise.
#include <string.h>

#include "engine_ops.h"
#include "stash_policy.h"

int ops_keeps_stash(const Pipeline *p, long step, int mb) {
    return p->pool.keeps[(size_t)pipeline_step_phase(p, step) * p->cfg->training.micro_batches + mb];
}

// ---------------------------------------------------------------------------------------------
// Lanes

int ops_gather_microbatch(const Pipeline *p, long step, int mb, const size_t *order,
                          size_t sample0, float *x, Label *labels, FgError *err) {
    int B = p->cfg->training.micro_batch;
    if (p->data->text)
        return text_train_batch(p->data->text, p->cfg->training.seed, (uint64_t)step,
                                (uint32_t)pipeline_global_microbatch(p, mb), B, x, labels, err);
    dataset_gather(p->data, order, sample0 + (size_t)mb * B, B, x, labels);
    return FG_OK;
}

int ops_mark_wrap_blocks(Pipeline *p, long step, FgError *err) {
    unsigned char *reads = p->tt.ends.wrap_blocks;
    if (!reads) return FG_OK;
    const int l = layers_first_param(p), blocks = layer_blocks(&p->model->layers[l]);
    memset(reads, 0, (size_t)blocks);
    for (int mb = 0; mb < p->cfg->training.micro_batches; mb++) {
        // A text's batches are a function of the step (no order, no first sample)
        int rc = ops_gather_microbatch(p, step, mb, NULL, 0, p->work.host_x, NULL, err);
        if (rc) return rc;
        for (int b = 0; b < blocks; b++)
            reads[b] |= stage_rows_read(&p->stage, l, b, p->work.host_x, p->cfg->training.micro_batch);
    }
    return FG_OK;
}

int ops_prepare_lanes(Pipeline *p, long step, const OpGroup *g, const size_t *order, size_t sample0,
                      int *n_lanes, FgError *err) {
    const Backend *be = p->be;
    int B = p->cfg->training.micro_batch, n = 0, rc = FG_OK;
    size_t in = (size_t)B * p->model->layers[p->stage.first].in;
    for (int i = 0; i < g->count && !rc; i++) {
        int idx = p->tt.plan->op[g->first + i];
        const ScheduledOp *op = &p->tt.sched.ops[idx];
        if (!op_runs(op, step, p->first_step)) continue;
        Lane *a = &p->work.lanes[n];
        *a = (Lane){.op = idx, .kind = op->kind, .microbatch = op->microbatch, .lag = op->lag,
                    .taker_lag = p->tt.taker_lag[idx], .rows = B};
        const void *msg = NULL;
        if (g->kind == OP_F) {
            int global_mb = pipeline_global_microbatch(p, a->microbatch);
            a->key = tangent_key(p->cfg->training.seed, step, global_mb, 0);
            if (p->is_first) {
                float *x = p->work.x_in + (size_t)n * p->work.x_stride;
                rc = ops_gather_microbatch(p, step, a->microbatch, order, sample0, p->work.host_x, NULL, err);
                be->upload(be, x, p->work.host_x, (size_t)B * p->model->in_features * sizeof(float));
                a->x = x;
            } else if (!(rc = messages_take(p, step, &msg, err))) {
                // Its activations, then its tangents, in the type of the stage's input (widened
                // into the odd layers' buffers: free until the stage's second layer writes them).
                const Stage *st = &p->stage;
                const char *tangents = (const char *)msg + stage_act_bytes(st, st->first, in);
                a->x = stage_act_load(st, st->first, msg, p->work.act[1] + (size_t)n * p->work.act_stride, in);
                a->xdot = p->run.sends_tangents ? stage_act_load(st, st->first, tangents,
                                                                 p->work.tan[1] + (size_t)n * p->work.tan_stride,
                                                                 in * p->K)
                                                : NULL;
            }
            if (p->saved.lane_labels && !rc) {  // local losses, or the fused head's
                Label *labels = p->saved.lane_labels + (size_t)n * B * p->model->tokens;
                rc = ops_gather_microbatch(p, step, a->microbatch, order, sample0, NULL, labels, err);
                a->labels = labels;
            }
            if (ops_keeps_stash(p, step, a->microbatch)) stash_hold(p, step, a);
        } else {
            rc = stash_backward_lane(p, step, a, err);
        }
        n++;
    }
    *n_lanes = n;
    return rc;
}

// The parameter tangents of lane a in layer l (step < 0: none): the guided estimator's tangent
// 0 is the reference, and the reference's dots with the tangents go into the step's scalars
// while the tangents are in memory.
static const ParamTangents *lane_tangents(Pipeline *p, long step, int l, const LayerSlot *s,
                                          const Lane *a, ParamTangents *t) {
    if (step < 0 || !p->K) return NULL;
    *t = (ParamTangents){.key = a->key};
    if (!s->ref || !p->run.dots_reference) return t;
    int Nr = p->cfg->training.micro_batches, L = p->model->n_layers;
    if (p->upd.ref_active && p->run.guided) t->guide = s->ref;
    t->ref = s->ref;
    t->ref_dots = p->scalars + scalars_ref_dots(p) +
                  (((size_t)p->tr->replica * L + l) * Nr + a->microbatch) * p->K;
    return t;
}

// Lane i's local-loss buffers (a resident stage): the linear's input, until F folds it.
static float *lane_local_input(const Pipeline *p, int i) {
    return p->saved.local_input + (size_t)i * p->cfg->training.micro_batch * p->model->max_width;
}

// Activity perturbation: the update needs layer l's input of lane a (i: its place in the
// group), saved until U in its type (stage_act_store: BF16 values narrowed exactly), or as
// floats in the lane until the local loss after it (stage_local_folds).
static void save_layer_input(Pipeline *p, long step, int l, const Lane *a, int i) {
    int B = p->cfg->training.micro_batch, in = p->model->layers[l].in;
    size_t n = (size_t)a->rows * in;
    if (stage_local_folds(&p->stage, l)) {
        p->be->copy(p->be, lane_local_input(p, i), a->x, n * sizeof(float));
        return;
    }
    void *saved = stage_act_at(&p->stage, l, layers_saved(p, step, l), (size_t)a->microbatch * B * in);
    stage_act_store(&p->stage, l, saved, a->x, n);
}

// A local loss at layer l: the estimate of layer l - 1's update (fg's mean over the step's
// samples, of every replica: they sum); zdot: layer l - 1's output tangent. A resident stage
// folds it into the layer's update at once, a streamed one keeps it for U. The lane's tangent
// goes no further.
static void end_local_loss(Pipeline *p, long step, int l, Lane *a, const float *zdot, int i) {
    const Stage *st = &p->stage;
    int B = p->cfg->training.micro_batch, rows = p->cfg->training.micro_batches * B;
    float scale = 1.0f / ((float)p->run.all_microbatches * B * p->K);
    if (stage_local_folds(st, l - 1)) {
        stage_local_output_grad(st, l, a->x, a->xdot, zdot, a->labels, a->rows, scale, p->saved.local_estimate);
        stage_local_fold(st, l - 1, a->microbatch, a->rows, lane_local_input(p, i), p->saved.local_estimate,
                         update_estimate_of_layer(p, l - 1));
    } else {
        float *est = layers_saved(p, step, l - 1) + stage_local_estimate_offset(st, l - 1, rows) +
                     (size_t)a->microbatch * B * p->model->layers[l].out;
        stage_local_output_grad(st, l, a->x, a->xdot, zdot, a->labels, a->rows, scale, est);
    }
    a->xdot = NULL;
}

// A fused head (LAYER_HEAD_LOSS) scores lane a's labels while its layer runs: they go to the
// backend, the record's weight is the adjoint's scale when a B op will take the micro-batch,
// and the derivatives go into the step's scalars at once (the next lane reuses loss_d).
static HeadScore head_begin(Pipeline *p, long step, const Lane *a) {
    size_t n = (size_t)a->rows * p->model->tokens;
    p->be->upload(p->be, p->work.labels, a->labels, n * sizeof(Label));
    return (HeadScore){.labels = p->work.labels, .d = p->work.loss_d,
                       .weight = step >= 0 && (a->stash || a->input) ? pipeline_adjoint_scale(p) : 1.0f};
}

static void head_end(Pipeline *p, Lane *a, const HeadScore *h, int tangents) {
    a->loss = h->loss, a->correct = h->correct;
    if (!tangents) return;
    if (p->run.d_per_sample) pipeline_per_sample_means(p, h->d, a->rows * p->model->tokens);
    int n_d = p->run.d_per_microbatch;
    double *d = p->scalars + scalars_d(p) + (size_t)pipeline_global_microbatch(p, a->microbatch) * n_d;
    for (int i = 0; i < n_d; i++) d[i] = h->d[i];
}

// Where lane a keeps layer l's output for its backward ops (NULL: nowhere), in the type of the
// next layer's input (stage_act_type).
static float *lane_kept(const Pipeline *p, const Lane *a, int l) {
    return a->stash ? a->stash + stage_stash_offset(&p->stage, l + 1, a->rows) : NULL;
}

// Where lane a (i: its place in the group) writes layer l's output as floats: straight into its
// stash where that keeps floats, else the lanes' buffer of the layer's parity cur.
static float *lane_output(const Pipeline *p, const Lane *a, int l, int i, int cur) {
    float *work = p->work.act[cur] + (size_t)i * p->work.act_stride;
    return stage_act_buffer(&p->stage, l + 1, lane_kept(p, a, l), work);
}

// Layer l's output y of lane a, made: kept in the stash's type where it is not already there.
static void lane_keep_output(const Pipeline *p, const Lane *a, int l, const float *y) {
    stage_act_keep(&p->stage, l + 1, lane_kept(p, a, l), y, (size_t)a->rows * p->model->layers[l].out);
}

// The first block of layer l from b on that op F must visit (layer_blocks: none): every block of
// a table that trains (its pending update is applied as the wave passes), else those the lanes
// read (a frozen table's blocks without their ids are not read at all: a LoRA base's).
static int next_forward_block(const Pipeline *p, int l, int b, const Lane *lanes, int n) {
    const int blocks = layer_blocks(&p->model->layers[l]);
    for (; b < blocks && !p->stage.plan[l].trains; b++)
        for (int i = 0; i < n; i++)
            if (stage_rows_read(&p->stage, l, b, lanes[i].x, lanes[i].rows)) return b;
    return b;
}

// A token table in row blocks (Layer.block_rows; CPU, weight tangents): each block acquired once
// (with its pending update) and every lane through it; a fused head's lanes carry their running
// softmax from block to block (p->work.rows_state) and are scored after the last block.
static int forward_blocks(Pipeline *p, long step, int l, Lane *lanes, int n, FgError *err) {
    Stage *st = &p->stage;
    const Layer *L = &p->model->layers[l];
    const size_t state = stage_rows_state_bytes(st, l, p->cfg->training.micro_batch);
    int cur = (l - st->first) & 1, rc = FG_OK, tangents = 0;
    for (int b = next_forward_block(p, l, 0, lanes, n), next; b < layer_blocks(L) && !rc; b = next) {
        LayerSlot s;
        unsigned parts, dirty;
        next = next_forward_block(p, l, b + 1, lanes, n);
        if ((rc = update_acquire_for_forward(p, l, b, next < layer_blocks(L) ? next : -1, &s, &parts, &dirty,
                                             err)))
            break;
        for (int i = 0; i < n; i++) {
            Lane *a = &lanes[i];
            ParamTangents t;
            const ParamTangents *tan = lane_tangents(p, step, l, &s, a, &t);  // the block's ref
            float *ydot = tan ? p->work.tan[cur] + (size_t)i * p->work.tan_stride : NULL;
            tangents = tan != NULL;
            stage_rows_forward(st, l, s.params, s.first, s.count, tan, a->x, a->xdot, a->labels,
                               lane_output(p, a, l, i, cur), ydot, a->rows, p->work.rows_state + i * state);
        }
        rc = layers_release_block(p, l, b, parts, dirty, err);
    }
    for (int i = 0; i < n && !rc; i++) {
        Lane *a = &lanes[i];
        float *y = lane_output(p, a, l, i, cur);
        float *ydot = tangents && !st->plan[l].scores ? p->work.tan[cur] + (size_t)i * p->work.tan_stride : NULL;
        stage_round_output(st, l, y, a->rows);  // an embedding's (a head's records stay FP32)
        if (ydot) stage_act_round(st, l + 1, ydot, (size_t)p->K * a->rows * p->model->layers[l].out);
        lane_keep_output(p, a, l, y);
        if (st->plan[l].scores) {
            HeadScore h = head_begin(p, step, a);
            stage_rows_finish(st, l, p->work.rows_state + i * state, &h, tangents, y, a->rows);
            head_end(p, a, &h, tangents);
        }
        a->x = y, a->xdot = ydot;
    }
    return rc;
}

// The lanes through every layer of the stage, without tangents when step < 0 (evaluation: it
// ends before the next layer once its run is to stop, the lanes unfinished; eval_pass.c).
int ops_forward_layers(Pipeline *p, long step, Lane *lanes, int n, FgError *err) {
    Stage *st = &p->stage;
    int rc = FG_OK;
    for (int i = 0; i < n; i++) {
        // Every layer's input is held (layers write straight into the stash), or the first's.
        float *held = lanes[i].stash ? lanes[i].stash : lanes[i].input;
        if (!held) continue;
        stage_act_store(st, st->first, held, lanes[i].x,
                        (size_t)lanes[i].rows * p->model->layers[st->first].in);
        if (stage_act_type(st, st->first) == FG_F32) lanes[i].x = held;
    }
    for (int l = st->first; l < st->last && !rc && !(step < 0 && pipeline_eval_stopping(p)); l++) {
        const Layer *L = &p->model->layers[l];
        LayerSlot s = {0};
        unsigned parts = 0, dirty = 0;
        if (layer_blocks(L) > 1) {
            rc = forward_blocks(p, step, l, lanes, n, err);
            continue;
        }
        if (L->param_count && (rc = update_acquire_for_forward(p, l, 0, -1, &s, &parts, &dirty, err))) break;
        int cur = (l - st->first) & 1;
        for (int i = 0; i < n; i++) {
            Lane *a = &lanes[i];
            ParamTangents t;
            const ParamTangents *tangents = lane_tangents(p, step, l, &s, a, &t);
            float *y = lane_output(p, a, l, i, cur);
            float *ydot = tangents ? p->work.tan[cur] + (size_t)i * p->work.tan_stride : NULL;
            if (tangents && L->param_count && p->run.saves_inputs) save_layer_input(p, step, l, a, i);
            const float *xdot = a->xdot;
            const int scores = st->plan[l].scores;
            HeadScore head = scores ? head_begin(p, step, a) : (HeadScore){0};
            stage_layer_forward(st, l, s.params, s.params16, tangents, scores ? &head : NULL, a->x, a->xdot, y,
                                ydot, a->rows);
            if (scores) head_end(p, a, &head, tangents != NULL);
            lane_keep_output(p, a, l, y);
            a->x = y, a->xdot = scores ? NULL : ydot;
            if (tangents && stage_local_head(st, l)) end_local_loss(p, step, l, a, xdot, i);
        }
        if (parts) rc = layers_release(p, l, parts, dirty, err);
    }
    return rc;
}

int ops_forward_group(Pipeline *p, long step, int n, const size_t *order, size_t sample0,
                      double *loss_sum, FgError *err) {
    int B = p->cfg->training.micro_batch, last = p->stage.last, rc;
    if ((rc = update_at(p, AT_FORWARD, step, err))) return rc;
    if ((rc = ops_forward_layers(p, step, p->work.lanes, n, err))) return rc;
    size_t rows_out = (size_t)B * p->model->layers[last - 1].out;
    for (int i = 0; i < n && !rc; i++) {
        const Lane *a = &p->work.lanes[i];
        if (p->is_last) {
            rc = p->loss->train(p, step, a, order, sample0, loss_sum, err);
            continue;
        }
        // Its activations, then its tangents, in the next stage's input type.
        stage_act_store(&p->stage, last, p->msg.outbox, a->x, rows_out);
        if (p->run.sends_tangents)
            stage_act_store(&p->stage, last, (char *)p->msg.outbox + stage_act_bytes(&p->stage, last, rows_out),
                            a->xdot, rows_out * p->K);
        rc = p->tr->send(p->tr, p->tr->stage + 1, message_tag(MSG_FORWARD, step, a->microbatch),
                         p->msg.outbox, messages_forward_bytes(p, last, B), err);
    }
    return rc;
}

// Layer l's input of backward lane a (i: its place in the group) as floats: where its stash
// keeps BF16, widened into the lanes' first buffer (op F's, free during backward ops).
static const float *lane_layer_input(const Pipeline *p, const Lane *a, int l, int i) {
    return stage_act_load(&p->stage, l, p->stash.layer_input(p, a, l),
                          p->work.act[0] + (size_t)i * p->work.act_stride,
                          (size_t)a->rows * p->model->layers[l].in);
}

// The output adjoint of layer l that Bi kept for Bw lane a (i: its place in the group; NULL:
// none) as floats: widened where BF16 into the lanes' first adjoint buffer (a Bw lane makes no
// input adjoint).
static const float *lane_kept_adjoint(const Pipeline *p, const Lane *a, int l, int i) {
    const float *kept = p->stash.bw_adjoint(p, a, l);
    return kept ? stage_act_load(&p->stage, l + 1, kept, p->work.adj[0] + (size_t)i * p->work.adj_stride,
                                 (size_t)a->rows * p->model->layers[l].out)
                : NULL;
}

// Lane a's input adjoint of layer l (dx, i: its place in the group; NULL: none), made: rounded to
// the type of the layer's input, as a message or the layer below will take it.
static void lane_round_adjoint(const Pipeline *p, const Lane *a, int l, float *dx) {
    if (dx) stage_adjoint_round(&p->stage, l, dx, (size_t)a->rows * p->model->layers[l].in);
}

// One layer of the backward ops for every lane, each computing its half (StashPolicy.half): B
// both, Bi the input adjoint (keeping the layer's output adjoint for Bw), Bw the weight
// gradient; where Bw redoes Bi (recompute) both halves (the same calls on the same inputs: the
// same bits), but for the stage's input. zero: the step's first gradient (it starts here).
static void backward_layer(Pipeline *p, int l, LayerSlot *s, int n, int zero) {
    const Layer *L = &p->model->layers[l];
    const Backend *be = p->be;
    Stage *st = &p->stage;
    int B = p->cfg->training.micro_batch, cur = (st->last - 1 - l) & 1;
    const int trains = st->plan[l].trains;
    if (zero && trains) be->zero(be, s->grad, L->param_count * sizeof(float));
    for (int i = 0; i < n; i++) {
        Lane *a = &p->work.lanes[i];
        const float *x = lane_layer_input(p, a, l, i);
        float *bw_dy = p->stash.bw_adjoint(p, a, l);
        // An op with a lag differentiates at the weights its activations were computed with
        // (their BF16 copy where they have one: prev16).
        const float *params = a->lag ? s->prev[a->lag - 1] : s->params;
        const Layer Lw = layer_with_weights16(L, a->lag ? s->prev16[a->lag - 1] : s->params16);
        const BackwardHalf half = p->stash.half[a->kind];
        // Bw reads no weights, but a fused head recomputes its logits
        if (half == HALF_WEIGHT) {
            if (bw_dy)
                be->backward(be, &Lw, layer_grad_reads_params(L) ? params : NULL, x,
                             lane_kept_adjoint(p, a, l, i), NULL, s->grad, B);
            continue;
        }
        const int sends = !p->is_first && a->kind != OP_BW;
        float *dx = l == st->first && !sends ? NULL : p->work.adj[cur] + (size_t)i * p->work.adj_stride;
        stage_act_keep(st, l + 1, bw_dy, a->dy, (size_t)B * L->out);
        // A layer that does not train (frozen: freeze, a LoRA base) has no weight gradient: its
        // B ops pass dx only.
        float *grad = half == HALF_BOTH && trains ? s->grad : NULL;
        be->backward(be, &Lw, params, x, a->dy, dx, grad, B);
        lane_round_adjoint(p, a, l, dx);
        a->dy = dx;
    }
}

// backward_layer over a token table in row blocks (Layer.block_rows), the blocks ascending: each
// lane's dx summed over them (block 0 starts it), the weight gradient a block at a time into
// the block's accumulator, finished per block (summed, set as update_grad, stepped) after the step's last
// B wave of a streamed stage.
static int backward_blocks(Pipeline *p, long step, long total, int l, int n, int zero, int last_w,
                           FgError *err) {
    const Layer *L = &p->model->layers[l];
    const Backend *be = p->be;
    Stage *st = &p->stage;
    int B = p->cfg->training.micro_batch, cur = (st->last - 1 - l) & 1, rc = FG_OK;
    const size_t C = layer_row_floats(L);
    const int trains = st->plan[l].trains;
    for (int b = 0; b < layer_blocks(L) && !rc; b++) {
        LayerSlot s;
        unsigned parts = p->upd.layer[l].backward_parts, dirty = 0;
        if ((rc = layers_acquire_block(p, l, b, -1, parts, &s, err))) break;
        int r0 = (int)(s.first / C), rows = (int)(s.count / C);
        if (zero && trains) be->zero(be, s.grad, s.count * sizeof(float));
        for (int i = 0; i < n; i++) {
            Lane *a = &p->work.lanes[i];
            const float *x = lane_layer_input(p, a, l, i);
            float *bw_dy = p->stash.bw_adjoint(p, a, l);  // never recomputed (config.c)
            const float *params = a->lag ? s.prev[a->lag - 1] : s.params;
            if (a->kind == OP_BW) {
                if (bw_dy)
                    stage_rows_backward(st, l, params, r0, rows, x, lane_kept_adjoint(p, a, l, i), NULL, s.grad,
                                        B);
                continue;
            }
            float *dx = p->is_first && l == st->first ? NULL : p->work.adj[cur] + (size_t)i * p->work.adj_stride;
            if (b == 0) stage_act_keep(st, l + 1, bw_dy, a->dy, (size_t)B * L->out);
            stage_rows_backward(st, l, params, r0, rows, x, a->dy, dx,
                                a->kind == OP_B && trains ? s.grad : NULL, B);
        }
        if (last_w) rc = p->upd.finish_in_wave(p, step, total, l, &s, &dirty, err);
        int rc2 = layers_release_block(p, l, b, parts, dirty, err);
        if (!rc) rc = rc2;
    }
    for (int i = 0; i < n; i++) {  // dx is whole after the last block
        Lane *a = &p->work.lanes[i];
        if (a->kind == OP_BW) continue;
        float *dx = p->is_first && l == st->first ? NULL : p->work.adj[cur] + (size_t)i * p->work.adj_stride;
        lane_round_adjoint(p, a, l, dx);
        a->dy = dx;
    }
    return rc;
}

int ops_backward_group(Pipeline *p, long step, long total, int n, int last_w, FgError *err) {
    Stage *st = &p->stage;
    int B = p->cfg->training.micro_batch, rc = FG_OK, weights = 0;
    for (int i = 0; i < n; i++) weights += p->work.lanes[i].kind != OP_BI;
    const int zero = weights && !p->upd.weight_lanes;
    p->upd.weight_lanes += weights;
    if (last_w) rc = update_at(p, AT_LAST_BACKWARD, step, err);
    if (!rc) rc = p->stash.rerun(p, n, err);
    for (int l = st->last - 1; l >= st->backward_first && !rc; l--) {
        LayerSlot s = {0};
        unsigned parts = p->model->layers[l].param_count ? p->upd.layer[l].backward_parts : 0, dirty = 0;
        if (layer_blocks(&p->model->layers[l]) > 1) {
            rc = backward_blocks(p, step, total, l, n, zero, last_w, err);
            continue;
        }
        if (parts && (rc = layers_acquire(p, l, -1, parts, &s, err))) break;
        backward_layer(p, l, &s, n, zero);
        if (parts && last_w) rc = p->upd.finish_in_wave(p, step, total, l, &s, &dirty, err);
        if (parts) {
            int rc2 = layers_release(p, l, parts, dirty, err);
            if (!rc) rc = rc2;
        }
    }
    size_t n_dx = (size_t)B * p->model->layers[st->first].in;
    for (int i = 0; i < n && !rc; i++) {
        Lane *a = &p->work.lanes[i];
        stash_lane_done(p, a);
        // Not to a step after the run's last: nobody would take it. In the type of the stage's
        // input (its values are already of it).
        if (a->taker_lag < 0 || step - a->lag + a->taker_lag >= total) continue;
        stage_act_store(st, st->first, p->msg.outbox, a->dy, n_dx);
        rc = p->tr->send(p->tr, p->tr->stage - 1, message_tag(MSG_BACKWARD, step - a->lag, a->microbatch),
                         p->msg.outbox, messages_plain_bytes(p, st->first, B), err);
    }
    return rc;
}
