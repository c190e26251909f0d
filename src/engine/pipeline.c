// The step engine's step loop and checkpoint visits (evaluation: eval_pass.c). The ops
// themselves are in pipeline_ops.c (F, B) and pipeline_update.c (U).
#include "pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_ops.h"
#include "pipeline_internal.h"
#include "progress.h"

// ---------------------------------------------------------------------------------------------
// The step

// The measured timeline: a group's ops share its time equally.
static void record_times(Pipeline *p, const OpGroup *g, int n_lanes, double t0, double t1) {
    int n = g->kind == OP_U ? 1 : n_lanes;
    for (int i = 0; i < n; i++) {
        int op = g->kind == OP_U ? p->tt.plan->op[g->first] : p->work.lanes[i].op;
        p->tt.measured[2 * op] = t0 + (t1 - t0) * i / n;
        p->tt.measured[2 * op + 1] = t0 + (t1 - t0) * (i + 1) / n;
    }
}

// One step in progress.
typedef struct {
    long step, total;
    const size_t *order;
    size_t sample0;
    double t_start, loss_sum;
    int last_w;  // group of the last B or Bw op that runs
    double waves_bound;  // StepResult.waves_bound so far
} StepRun;

// A streamed stage's group (a wave through its layers): its I/O and compute overlap within it,
// so it takes at least the larger. Summed, they show what a step can reach when a wave's own
// I/O and compute differ (bp's forward flash-bound, its backward compute-bound).
static void add_wave_bound(Pipeline *p, StepRun *r, const LayerStreamStats *before, double t0) {
    LayerStreamStats now;
    p->src.io_stats(&p->src, &now);
    LayerStreamStats d = layer_stream_stats_sub(now, *before);
    r->waves_bound += FG_MAX(d.busy_seconds, FG_MAX(wall_seconds() - t0 - d.wait_seconds, 0.0));
}

static void find_roles(const Pipeline *p, StepRun *r) {
    r->last_w = -1;
    for (int gi = 0; gi < p->tt.plan->n_groups; gi++) {
        const OpGroup *g = &p->tt.plan->groups[gi];
        for (int i = 0; i < g->count; i++) {
            const ScheduledOp *op = &p->tt.sched.ops[p->tt.plan->op[g->first + i]];
            if ((op->kind == OP_B || op->kind == OP_BW) && op_runs(op, r->step, p->first_step))
                r->last_w = gi;
        }
    }
}

static int run_group(Pipeline *p, StepRun *r, int gi, FgError *err) {
    const OpGroup *g = &p->tt.plan->groups[gi];
    int n = 0, rc;
    // Waiting for the group's messages counts as idle time, before the op starts.
    if (g->kind != OP_U &&
        ((rc = ops_prepare_lanes(p, r->step, g, r->order, r->sample0, &n, err)) || !n))
        return rc;
    double t0 = wall_seconds(), waited = 0.0, t_wave = t0;
    LayerStreamStats before = {0};
    if (p->src.io_stats) p->src.io_stats(&p->src, &before);
    if (g->kind == OP_F) {
        rc = ops_forward_group(p, r->step, n, r->order, r->sample0, &r->loss_sum, err);
    } else if (g->kind == OP_B) {
        rc = ops_backward_group(p, r->step, r->total, n, gi == r->last_w, err);
        // The stage's gradient is complete: its sum over the replicas runs while the stage idles.
        // (A resident stage's, in one buffer; a streamed one sums each layer's in its wave.)
        if (!rc && gi == r->last_w && p->src.stage_grad && p->tr->replicas > 1)
            rc = p->tr->start_replica_sum(p->tr, p->src.stage_grad, p->n, err);
    } else {
        p->scalars[0] = r->loss_sum;
        rc = update_op(p, r->step, r->total, &waited, err);
        t0 += waited;  // drawn after its waits, with the duration of its work
    }
    // A device queues the group's work: it ends when the device is done (and any fault in it
    // is reported here, at the op that caused it).
    if (!rc) rc = p->be->sync(p->be, err);
    record_times(p, g, n, t0 - r->t_start, wall_seconds() - r->t_start);
    if (p->src.io_stats) add_wave_bound(p, r, &before, t_wave);
    return rc;
}

// A step's start: its phase's plan, cleared sums, its receives posted.
static int begin_step(Pipeline *p, StepRun *r, FgError *err) {
    p->tt.plan = &p->tt.plans[pipeline_step_phase(p, r->step)];
    p->upd.weight_lanes = 0;
    find_roles(p, r);
    memset(p->scalars, 0, p->n_scalars * sizeof(double));
    if (p->stage.not_finite)  // what evaluation or the calibration counted is not this step's
        p->be->zero(p->be, p->stage.not_finite, 2 * (size_t)p->model->n_layers * sizeof(double));
    int rc = ops_mark_wrap_blocks(p, r->step + 1, err);  // read by this step's last wave
    return rc ? rc : messages_start(p, r->step, err);
}

void pipeline_reserve_run_scalars(Pipeline *p, int n) {
    double *all = fg_alloc_bytes((p->n_scalars + (size_t)n) * sizeof(double));
    memcpy(all, p->scalars, p->n_scalars * sizeof(double));
    memset(all + p->n_scalars, 0, (size_t)n * sizeof(double));
    fg_free(p->scalars);
    p->scalars = all;
    p->n_run_scalars = (size_t)n;
}

double *pipeline_run_scalars(Pipeline *p) { return p->scalars + p->n_scalars; }

// Every op of the step that ran into the run's sums, once caches and clocks have settled.
static void add_op_times(Pipeline *p, long step) {
    if (step < p->first_step + 3) return;
    const ExecPlan *plan = p->tt.plan;
    for (int i = 0; i < plan->n_ops; i++) {
        const int idx = plan->op[i];
        const ScheduledOp *op = &p->tt.sched.ops[idx];
        if (!op_runs(op, step, p->first_step)) continue;
        p->tt.op_seconds[op->kind] += p->tt.measured[2 * idx + 1] - p->tt.measured[2 * idx];
        p->tt.op_count[op->kind]++;
    }
}

void pipeline_costs_of_kinds(const Pipeline *p, const double seconds[OP_U + 1], double cost[N_OP_COSTS]) {
    const int M = p->tr->stages, s = p->tr->stage;
    const double *planned = p->tt.costs;
    const double bi = planned[COST_BI * M + s], bw = planned[COST_BW * M + s];
    cost[COST_F] = seconds[OP_F] >= 0 ? seconds[OP_F] : planned[COST_F * M + s];
    cost[COST_BI] = seconds[OP_BI] >= 0 ? seconds[OP_BI] : bi;
    cost[COST_BW] = seconds[OP_BW] >= 0 ? seconds[OP_BW] : bw;
    // Bw redoing Bi (recompute): the time past Bi's is Bw's; where noise leaves less, a third
    // (Bw's share where the rerun F, Bi and Bw cost alike)
    if (seconds[OP_BW] >= 0 && p->stash.half[OP_BW] == HALF_BOTH)
        cost[COST_BW] = FG_MAX(cost[COST_BW] - cost[COST_BI], cost[COST_BW] / 3);
    cost[COST_U] = seconds[OP_U] >= 0 ? seconds[OP_U] : planned[COST_U * M + s];
    cost[COST_ZERO] = 0.0;
    if (seconds[OP_B] >= 0) {  // a whole B: shared between Bi and Bw as planned
        const double ratio = bi + bw > 0 ? bi / (bi + bw) : 0.5;
        cost[COST_BI] = seconds[OP_B] * ratio, cost[COST_BW] = seconds[OP_B] * (1 - ratio);
    }
}

void pipeline_measured_costs(const Pipeline *p, double cost[N_OP_COSTS]) {
    double seconds[OP_U + 1];
    for (int k = 0; k <= OP_U; k++)
        seconds[k] = p->tt.op_count[k] ? p->tt.op_seconds[k] / p->tt.op_count[k] : -1.0;
    pipeline_costs_of_kinds(p, seconds, cost);
}

int pipeline_step(Pipeline *p, long step, long total, const size_t *order, size_t sample0,
                  StepResult *out, FgError *err) {
    StepRun r = {.step = step, .total = total, .order = order, .sample0 = sample0,
                 .t_start = wall_seconds()};
    int rc = begin_step(p, &r, err);
    for (int gi = 0; gi < p->tt.plan->n_groups && !rc; gi++) rc = run_group(p, &r, gi, err);
    if (!rc) add_op_times(p, step);
    pipeline_read_not_finite(p);  // what ran after op U's sum (this rank's own)
    *out = p->upd.stats;
    out->loss = p->scalars[0] / p->run.all_microbatches;
    // The counts are the grid's sums after op U: the forward's first layer, else the backward's
    // first (the highest: adjoints go down).
    const double *bad = p->scalars + scalars_not_finite(p);
    const int L = p->model->n_layers;
    out->not_finite_at = -1, out->not_finite_adjoint = 0;
    for (int l = L - 1; l >= 0; l--)
        if (bad[l] > 0) out->not_finite_at = l;
    for (int l = 0; l < L && out->not_finite_at < 0; l++)
        if (bad[L + l] > 0) out->not_finite_at = l, out->not_finite_adjoint = 1;
    out->seconds = wall_seconds() - r.t_start;
    out->waves_bound = r.waves_bound;
    return rc;
}

// Each step of the calibration: the F groups alone, on the first samples of the data.
static int forward_only_step(Pipeline *p, StepRun *r, double *f_seconds, FgError *err) {
    int rc = begin_step(p, r, err), n_f = 0;
    double *f = fg_alloc_bytes(sizeof(double) * (size_t)FG_MAX(p->tt.plan->n_ops, 1));
    for (int gi = 0; gi < p->tt.plan->n_groups && !rc; gi++) {
        const OpGroup *g = &p->tt.plan->groups[gi];
        if (g->kind != OP_F) continue;
        rc = run_group(p, r, gi, err);
        for (int i = 0; i < g->count; i++) {
            int op = p->tt.plan->op[g->first + i];
            f[n_f++] = p->tt.measured[2 * op + 1] - p->tt.measured[2 * op];
        }
    }
    *f_seconds = n_f ? fg_median(f, (size_t)n_f) : 0.0;
    fg_free(f);
    return rc;
}

int pipeline_time_forward(Pipeline *p, int steps, double *f_seconds, FgError *err) {
    const TrainingConfig *tc = &p->cfg->training;
    const size_t samples = (size_t)tc->micro_batches * tc->micro_batch, count = p->data->count;
    size_t *order = fg_alloc_bytes(sizeof(size_t) * samples);
    for (size_t i = 0; i < samples; i++) order[i] = count ? i % count : 0;
    double *per_step = fg_alloc_bytes(sizeof(double) * (size_t)FG_MAX(steps, 1));
    int rc = FG_OK;
    for (int k = 0; k < steps && !rc; k++) {
        StepRun r = {.step = p->first_step, .total = p->first_step + 1, .order = order,
                     .t_start = wall_seconds()};
        rc = forward_only_step(p, &r, &per_step[k], err);
    }
    *f_seconds = steps > 1 ? fg_median(per_step + 1, (size_t)steps - 1) : per_step[0];
    fg_free(order);
    fg_free(per_step);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints and the replica check see the stage's layers one at a time.

// The reference holds a direction when any stage has a non-zero part: decided together, or
// the stages would disagree about the guided estimator's tangent 0.
int pipeline_refresh_ref(Pipeline *p, FgError *err) {
    double norm2 = 0.0;
    int rc = FG_OK;
    if (!p->need.ref) return FG_OK;
    for (int l = layers_first_param(p); l >= 0 && !rc; l = layers_next_param(p, l, 1))
        for (int b = 0; b < layer_blocks(&p->model->layers[l]) && !rc; b++) {
            LayerSlot s;
            if ((rc = layers_acquire_block(p, l, b, 1, LAYER_WEIGHTS, &s, err))) break;
            if (s.ref) norm2 += p->be->dot(p->be, s.ref, s.ref, s.count);
            rc = layers_release_block(p, l, b, LAYER_WEIGHTS, 0, err);
        }
    if (!rc) rc = p->tr->allreduce_sum(p->tr, &norm2, 1, err);
    p->upd.ref_active = norm2 > 0;
    return rc;
}

// One slot's checkpoint buffers (a whole layer, or a row block: floats [s->first, + s->count))
// through visit, as host memory (staged on a device). A layer that does not train (frozen) is
// visited and checkpointed with its parameters alone (no optimizer state, no reference). A block is visited in the slot itself, so a
// token table in row blocks passes through block-sized buffers, never a table-sized copy.
static int visit_slot(Pipeline *p, const Layer *L, LayerSlot *s, int writable, LayerVisitor visit,
                      void *arg, FgError *err) {
    const Backend *be = p->be;
    float *bufs[4] = {s->params}, *host[4] = {NULL};
    int n = p->stage.plan[L->index].trains ? 1 + p->need.opt_buffers + p->need.ref : 1, real = 1, rc = FG_OK;
    for (int b = 0; s->state && b < p->need.opt_buffers; b++) bufs[real++] = s->state + b * s->state_stride;
    if (s->ref) bufs[real++] = s->ref;
    real = FG_MIN(real, n);  // a resident layer that does not train: its state (zeros) unvisited
    size_t bytes = s->count * sizeof(float);
    if (writable && !layers_writes(p)) real = 0;  // a replica sharing its node's slots: loaded, not kept
    for (int b = 0; b < n; b++)
        host[b] = b >= real ? fg_alloc_floats(s->count) : be->on_device ? p->host_layer[b] : bufs[b];
    for (int b = 0; b < real && be->on_device; b++) be->download(be, host[b], bufs[b], bytes);
    if (be->on_device) rc = be->sync(be, err);
    if (!rc) rc = visit(arg, L, s->first, s->count, host, err);
    for (int b = 0; !rc && writable && be->on_device && b < real; b++) be->upload(be, bufs[b], host[b], bytes);
    if (!rc && be->on_device) rc = be->sync(be, err);
    for (int b = real; b < n; b++) fg_free(host[b]);
    return rc;
}

// One layer through visit, block by block ascending (a layer without blocks is its block 0):
// a load writes each block's new version as it goes, as the update does.
static int visit_layer(Pipeline *p, int l, int writable, LayerVisitor visit, void *arg, FgError *err) {
    const Layer *L = &p->model->layers[l];
    int rc = FG_OK;
    for (int b = 0; b < layer_blocks(L) && !rc; b++) {
        LayerSlot s;
        // As floats, also a layer whose streamed slot holds BF16 (widened for the visit).
        const unsigned parts = LAYER_WEIGHTS | LAYER_FLOATS;
        if ((rc = layers_acquire_block(p, l, b, 1, parts, &s, err))) break;
        rc = visit_slot(p, L, &s, writable, visit, arg, err);
        int rc2 = layers_release_block(p, l, b, parts, writable && !rc ? LAYER_WEIGHTS : 0, err);
        rc = rc ? rc : rc2;
    }
    return rc;
}

int pipeline_visit_layers(Pipeline *p, int writable, long next_step, LayerVisitor visit, void *arg,
                          FgError *err) {
    int rc = update_at(p, writable ? AT_LOAD : AT_READ, next_step, err);
    // A load writes the frozen layers first: a store keeps one copy of them (io/layer_store.h),
    // so once any trained layer has the new version, every frozen one has it too, and a load
    // cut short is found out at reopening instead of mixing the old base with the new weights.
    for (int pass = 0; pass < 1 + writable && !rc; pass++)
        for (int l = layers_first_param(p); l >= 0 && !rc; l = layers_next_param(p, l, 1))
            if (!writable || p->stage.plan[l].trains == (pass == 1))
                rc = visit_layer(p, l, writable, visit, arg, err);
    if (rc || !writable) return rc;
    if (!(rc = p->src.flush(&p->src, err))) p->first_step = next_step;
    return rc ? rc : pipeline_refresh_ref(p, err);
}

int pipeline_publish(Pipeline *p, FgError *err) {
    return p->src.publish ? p->src.publish(&p->src, err) : FG_OK;
}

int pipeline_solo(Pipeline *p, int on, FgError *err) {
    if (!p->src.solo) return FG_OK;
    int rc = on ? pipeline_apply_pending(p, err) : FG_OK;
    return rc ? rc : p->src.solo(&p->src, on, err);
}

double pipeline_stash_bytes(const Pipeline *p) {
    int B = p->cfg->training.micro_batch;
    double saved = p->saved.blocks[0] ? (1 + (p->saved.blocks[1] != NULL)) *
                  (double)stage_saved_floats(&p->stage, p->cfg->training.micro_batches * B) : 0.0;
    const StashPolicy *k = &p->stash;
    return ((double)p->pool.n_stash_alloc * k->stash_floats + (double)p->pool.n_input_alloc * k->input_floats +
            (double)p->pool.n_adj_alloc * k->adj_floats + saved) * sizeof(float);
}
