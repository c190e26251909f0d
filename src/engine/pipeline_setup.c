// Setting up a stage of the step engine: its layer source (where its layers live is decided in
// source_plan.c), the buffers its op groups need, the measured op costs and the timetable.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_ops.h"
#include "eval_pass.h"
#include "pipeline.h"
#include "pipeline_internal.h"
#include "progress.h"
#include "source_plan.h"
#include "stash_policy.h"

static int open_resident(Pipeline *p, const LayerStreams *streams, FgError *err) {
    (void)streams;
    return layer_source_resident(p->be, p->cfg, p->model, p->stage.first, p->stage.last, &p->src, err);
}

// What the step's stash pool holds at most, as the stage's needs count it (streamed: within the
// budget beside the slots): stashes and Bi's adjoints for Bw, idle between steps, which
// evaluation's windows take then (eval_pass.h).
static double pool_bytes(const Pipeline *p) {
    const ActivationSizes z = activation_sizes(p->cfg, &p->stage, p->is_first, p->is_last);
    double by[N_MEM_ACTIVATIONS];
    activation_bytes(&z, p->run.stashes_in_flight, p->run.adjoints_in_flight, 1, 1, by);
    return by[MEM_STASH] + by[MEM_BW_ADJOINTS];
}

static int open_streamed(Pipeline *p, const LayerStreams *streams, FgError *err) {
    long next_step = 0;
    int rc = layer_source_streamed(p->be, p->cfg, p->model, p->stage.first, p->stage.last, p->tr, streams,
                                   source_streamed_needs_bytes(p), p->runtime, &p->src, &next_step, err);
    p->first_step = next_step;
    return rc;
}

// The layer source's buffers into the stage's account (LayerSource.held).
static void count_source(Pipeline *p) {
    for (int o = N_MEM_ACTIVATIONS; o < N_MEM_OWNERS; o++)
        mem_account_add(&p->mem, (MemOwner)o, p->src.held[o]);
}

// A buffer of n floats that the stage's account counts under `owner`.
static float *alloc_counted(Pipeline *p, MemOwner owner, size_t n) {
    mem_account_add(&p->mem, owner, (double)n * sizeof(float));
    return backend_alloc_floats(p->be, n);
}

static void alloc_lanes(Pipeline *p, int group) {
    LaneBuffers *w = &p->work;
    Messages *msg = &p->msg;
    w->lanes = calloc((size_t)group, sizeof(Lane));
    for (int i = 0; i < 2; i++) {
        w->act[i] = alloc_counted(p, MEM_LANES, (size_t)group * w->act_stride);
        if (w->tan_stride) w->tan[i] = alloc_counted(p, MEM_LANES, (size_t)group * w->tan_stride);
        if (p->need.grad) w->adj[i] = alloc_counted(p, MEM_LANES, (size_t)group * w->adj_stride);
    }
    // One slot more than a group takes: the next group's first message is posted while the
    // group still uses all of its own.
    msg->n_inbox = group + 1;
    const size_t slot = msg->slot_bytes / sizeof(float);  // 4-byte words (stage_act_floats)
    msg->inbox = (unsigned char *)alloc_counted(p, MEM_MESSAGES, (size_t)msg->n_inbox * slot);
    msg->outbox = alloc_counted(p, MEM_MESSAGES, slot);
    if (p->is_first) w->x_in = alloc_counted(p, MEM_LANES, (size_t)group * w->x_stride);
    size_t state = stage_rows_state_bytes(&p->stage, p->stage.last - 1, p->cfg->training.micro_batch);
    if (state) {
        mem_account_add(&p->mem, MEM_LANES, (double)group * state);
        w->rows_state = fg_alloc_bytes((size_t)group * state);
    }
}

static void alloc_buffers(Pipeline *p) {
    const Config *c = p->cfg;
    const Backend *be = p->be;
    int N = c->training.micro_batches, B = c->training.micro_batch, NR = N * p->tr->replicas, K = p->K;
    int group = 0;
    for (int ph = 0; ph < p->tt.sched.n_phases; ph++) group = FG_MAX(group, p->tt.plans[ph].max_group);
    alloc_lanes(p, group);
    const size_t labels = (size_t)B * p->model->tokens;  // a micro-batch's labels (GPT: one per token)
    p->work.labels = be->alloc(be, labels * sizeof(Label));
    p->work.host_x = fg_alloc_floats(p->work.x_stride);  // stage 0's inputs as gathered
    p->work.host_labels = fg_alloc_bytes(labels * sizeof(Label));
    const int wrap_blocks = source_wrap_blocks(p);
    if (wrap_blocks) p->tt.ends.wrap_blocks = fg_alloc_bytes((size_t)wrap_blocks);
    // Activity perturbation's per-row derivatives before a GPT's per-sample means: K x B x T.
    p->work.loss_d = fg_alloc_floats((size_t)FG_MAX(p->run.d_per_microbatch * p->model->tokens, 1));
    // A B op lags its F by at most the timetable's lag: that many steps' dz (and stashes) at once.
    p->pool.rings = config_timetable_lag(c) + 1;
    if (p->is_last && p->run.backprops)
        for (int i = 0; i < p->pool.rings; i++)
            p->pool.dz[i] = alloc_counted(p, MEM_LOSS_ADJOINTS, (size_t)N * labels * pipeline_adjoint_width(p));
    p->pool.free_stash = fg_alloc_bytes((SCHED_MAX_LAG + 1) * (size_t)(N + 1) * sizeof(float *));
    p->pool.free_adj = fg_alloc_bytes((SCHED_MAX_LAG + 1) * (size_t)(N + 1) * sizeof(float *));
    p->pool.free_input = fg_alloc_bytes((SCHED_MAX_LAG + 1) * (size_t)(N + 1) * sizeof(float *));
    p->n_scalars = scalars_not_finite(p) + 2 * (size_t)p->model->n_layers;
    p->scalars = fg_alloc_bytes(p->n_scalars * sizeof(double));
    if (p->run.activations == FG_BF16) {  // counted where values are rounded (stage_act.c)
        p->stage.not_finite = be->alloc(be, 2 * (size_t)p->model->n_layers * sizeof(double));
        p->not_finite_read = fg_alloc_bytes(2 * (size_t)p->model->n_layers * sizeof(double));
    }
    p->upd.pending.coeff = fg_alloc_floats((size_t)NR * FG_MAX(p->run.d_per_microbatch, 1));
    if (c->method.cv_scale == CV_SCALE_AUTO) cv_scale_init(&p->upd.cv, p->model->n_layers);
    size_t saved = p->run.saves_inputs ? stage_saved_floats(&p->stage, N * B) : 0;
    if (saved) {
        for (int i = 0; i < p->upd.saved_copies; i++)
            p->saved.blocks[i] = alloc_counted(p, MEM_SAVED_INPUTS, saved);
        p->saved.work = alloc_counted(p, MEM_SAVED_INPUTS, (size_t)N * B * p->model->max_width);
        size_t widened = stage_saved_widened_floats(&p->stage, N * B);
        if (widened) p->saved.widened = alloc_counted(p, MEM_SAVED_INPUTS, widened);
    }
    if (p->stage.local_groups && !p->stage.local_keeps) {
        size_t lane = (size_t)B * p->model->max_width;
        p->saved.local_input = alloc_counted(p, MEM_SAVED_INPUTS, (size_t)group * lane);
        p->saved.local_estimate = alloc_counted(p, MEM_SAVED_INPUTS, lane);
    }
    if (p->stage.local_groups || p->stage.plan[p->stage.last - 1].scores)
        p->saved.lane_labels = fg_alloc_bytes((size_t)group * labels * sizeof(Label));
    for (int i = 0; p->run.grad_delay && i <= p->run.grad_delay; i++)
        p->upd.delayed[i] = alloc_counted(p, MEM_GRADIENTS, p->n);
    // Op U's estimate, and with statistics the plain fg estimate beside it: in the one layer
    // buffer the source lends (streamed: each layer's is formed again as it is applied), else
    // the stage's estimate (count_source's) and one layer's scratch.
    float *lent = p->src.layer_buffer;
    if (p->run.forms_estimate) p->upd.estimate = lent ? lent : backend_alloc_floats(be, p->n);
    if (K && p->upd.want_stats) p->upd.scratch = lent ? lent : alloc_counted(p, MEM_GRADIENTS, p->largest);
    for (int b = 0; be->on_device && b < 4; b++) p->host_layer[b] = fg_alloc_floats(p->largest);
}

// The stage's op costs (op_cost.h), timed as the run says (op_timing.h: through the engine's own
// step).
static int timed_costs(Pipeline *p, double cost[N_OP_COSTS], FgError *err) {
    const Transport *t = p->tr;
    return p->cost_source.time(p->be, p->cfg, p->model, p->layout, t->stage, t->stages,
                               t->replica, t->replicas, cost, err);
}

// Out of core, the I/O of each wave dominates and timing would read the whole store: the GEMM
// work at a nominal 10 GFLOP/s is planned instead.
static int nominal_costs(Pipeline *p, double cost[N_OP_COSTS], FgError *err) {
    (void)err;
    source_nominal_costs(p->cfg, (double)p->n, p->K, cost, 1);
    return FG_OK;
}

// What each place of the layers brings, by source_choose's choice ([0] resident, [1] streamed):
// how its ops are costed and how it opens.
typedef struct {
    int (*costs)(Pipeline *p, double cost[N_OP_COSTS], FgError *err);
    int (*open)(Pipeline *p, const LayerStreams *streams, FgError *err);
} SourceKind;

static const SourceKind source_kinds[2] = {{timed_costs, open_resident}, {nominal_costs, open_streamed}};

typedef struct {
    Pipeline *p;
    double *cost;
    const SourceKind *kind;  // where the stage's layers will live (source_choose)
} StageTiming;

static int measure_costs(void *arg, FgError *err) {
    const StageTiming *t = arg;
    return t->kind->costs(t->p, t->cost, err);
}

// Every stage times its own ops (in turns), one sum gives everyone every stage's costs (the
// mean over the replicas): costs[kind * M + stage].
static int measure_all_costs(Pipeline *p, double *costs, const SourceKind *kind, FgError *err) {
    Transport *t = p->tr;
    int M = t->stages;
    double mine[N_OP_COSTS];
    int rc = measure_in_turns(t, measure_costs, &(StageTiming){p, mine, kind}, err);
    for (int i = 0; i < N_OP_COSTS; i++) costs[i * M + t->stage] = mine[i];
    if (!rc) rc = t->allreduce_sum_world(t, costs, N_OP_COSTS * M, err);
    for (int i = 0; i < N_OP_COSTS * M; i++) costs[i] /= t->replicas;
    return rc;
}

// The deterministic builder turns identical costs into identical timetables, on every rank.
// without_b: fg+bp's timetable without B ops (for the calibration).
static int build_timetable(Pipeline *p, const double *costs, int without_b, FgError *err) {
    return pipeline_build_timetable(p->cfg, p->tr->stages, costs, without_b, &p->tt.sched,
                                    p->tt.choice, sizeof p->tt.choice, err);
}

// What the timetable asks of this stage: which F ops keep stashes, where its B and Bi ops send
// their adjoints, the first step with an exact gradient, and the order it runs its ops in. If
// any stage streams, every stage runs layer-major, so that neighbours agree on the order of
// their messages.
static void plan_stage(Pipeline *p) {
    const Schedule *S = &p->tt.sched;
    int N = p->cfg->training.micro_batches, s = p->tr->stage;
    p->pool.keeps = fg_alloc_bytes((size_t)S->n_phases * N);
    p->tt.taker_lag = fg_alloc_bytes(sizeof(int) * (size_t)FG_MAX(S->n_ops, 1));
    for (int ph = 0; ph < S->n_phases; ph++) {
        for (int b = 0; b < N; b++) p->pool.keeps[ph * N + b] = (unsigned char)schedule_stashes(S, ph, s, b);
        const ScheduledOp *ops;
        int n = schedule_stage_ops(S, ph, s, &ops);
        for (int i = 0; i < n; i++) {
            p->tt.taker_lag[ops + i - S->ops] = op_adjoint_taker_lag(S, ph, &ops[i]);
            // Each version held costs a copy of the stage's weights per step: only those used.
            if (ops[i].kind != OP_F) p->tt.old_versions = FG_MAX(p->tt.old_versions, ops[i].lag);
        }
    }
    // Every phase recurs within n_phases steps once the lags have passed.
    long *first_c = &p->upd.first_c_step;
    *first_c = LONG_MAX;
    for (long k = p->first_step; k < p->first_step + S->n_phases + SCHED_MAX_LAG && *first_c == LONG_MAX; k++)
        for (int t = 0; t < S->M; t++) {
            const ScheduledOp *ops;
            int n = schedule_stage_ops(S, (int)(k % S->n_phases), t, &ops);
            for (int i = 0; i < n; i++)
                if (ops[i].kind == OP_BW && op_runs(&ops[i], k, p->first_step)) *first_c = k;
        }
    for (int ph = 0; ph < S->n_phases; ph++) exec_plan_build(S, ph, s, p->layer_major, &p->tt.plans[ph]);
    int backward = 0, turns = 1;
    for (int ph = 0; ph < S->n_phases; ph++)
        for (int g = 0; g < p->tt.plans[ph].n_groups; g++) {
            const ExecPlan *e = &p->tt.plans[ph];
            int next = g + 1;
            while (next < e->n_groups && e->groups[next].kind == OP_U) next++;
            backward |= e->groups[g].kind == OP_B;
            if (e->groups[g].kind == OP_F) turns &= next < e->n_groups && e->groups[next].kind == OP_B;
        }
    p->tt.ends.wraps[0] = 1, p->tt.ends.wraps[1] = !backward, p->tt.ends.turns = backward && turns;
    p->tt.ends.forward_parts = LAYER_WEIGHTS | (p->run.forms_estimate || p->need.ref ? 0 : LAYER_PARAMS_ONLY);
    p->tt.plan = &p->tt.plans[0];
    p->tt.measured = fg_alloc_bytes((size_t)2 * S->n_ops * sizeof(double));
}

static void unplan_stage(Pipeline *p) {
    for (int ph = 0; ph <= SCHED_MAX_LAG; ph++) exec_plan_free(&p->tt.plans[ph]);
    void *on_host[] = {p->pool.keeps, p->tt.taker_lag, p->tt.measured};
    for (size_t i = 0; i < sizeof on_host / sizeof on_host[0]; i++) fg_free(on_host[i]);
    p->pool.keeps = NULL, p->tt.taker_lag = NULL, p->tt.measured = NULL, p->tt.plan = NULL;
    p->tt.old_versions = 0, p->tt.ends.wraps[0] = p->tt.ends.wraps[1] = p->tt.ends.turns = 0;
    schedule_free(&p->tt.sched);
}

// fg+bp's auto timetable packs B ops into the gaps between F ops, so it is as good as the F
// times it is given: the start-up timing runs each stage alone, while in training every stage
// runs at once and they share the machine (memory bandwidth, clocks). An explicit select keeps
// its ops and only its planned times change (and the equivalence tests, which use it, check
// that the calibration leaves no trace). Out of core, the F times are nominal and the I/O
// varies; where ranks share cores, F ops timed at once measure how the OS shares the cores
// that moment: no calibration.
const char *pipeline_calibration_off(const Pipeline *p) {
    const Config *c = p->cfg;
    if (!p->run.fills_bubbles || p->tr->stages == 1) return "not fg+bp on several stages";
    if (c->timetable.calibrate_steps == 0) return "calibrate_steps = 0";
    if (p->layer_major) return "stages stream their layers";
    if (p->tr->shares_cores) return "ranks share cores";
    return NULL;
}

// Times F in steps without B ops, then plans the timetable with those F times. Both
// timetables run every op as its own group (nothing streams), so the lanes and the inbox
// sized for the first fit the second.
static int calibrate_timetable(Pipeline *p, double *costs, FgError *err) {
    Transport *t = p->tr;
    int M = t->stages;
    double f, *timed = fg_alloc_bytes(sizeof(double) * (size_t)M);
    int rc = pipeline_time_forward(p, p->cfg->timetable.calibrate_steps, &f, err);
    timed[t->stage] = f / t->replicas;
    if (!rc) rc = t->allreduce_sum_world(t, timed, M, err);
    for (int s = 0; s < M && !rc; s++)  // a stage too quick for the clock still costs something
        costs[COST_F * M + s] = FG_MAX(timed[s], 1e-9);
    if (!rc) {
        unplan_stage(p);
        if ((rc = build_timetable(p, costs, 0, err))) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            rc = fg_fail(err, rc, "planning with the calibrated F times: %s", why);
        }
        if (!rc) plan_stage(p);
    }
    fg_free(timed);
    return rc;
}

// fg+bp's mix with shrink 0 updates a stage by its exact gradient alone: a stage whose
// timetable backpropagates nothing (no bubble to fill, e.g. one stage with select = -1) would
// never learn. Every rank sees the same timetable, so all of them refuse it alike.
int pipeline_check_every_stage_learns(const Config *c, const Schedule *S, FgError *err) {
    const RunPlan run = run_plan(c, 1);
    if (!run.forms_estimate || !estimator_info(run.estimator)->base_is_c || run.shrink > 0) return FG_OK;
    for (int t = 0; t < S->M; t++)
        if (!schedule_stage_bubbles(S, t).corrections)
            return fg_fail(err, FG_ERR_INPUT, "stage %d backpropagates no micro-batch (its "
                           "timetable has no bubble for one) and estimator = mix with shrink = 0 "
                           "updates by the exact gradient alone: it would never learn; set select "
                           ">= 1 or shrink > 0", t);
    return FG_OK;
}

int pipeline_stage_init(Stage *st, const Backend *be, const Config *c, const Model *m, int first,
                        int last, FgError *err) {
    const int K = run_plan(c, 1).tangents;
    int rc = stage_init(st, be, m, first, last, c->training.micro_batch, K, err);
    if (rc) return rc;
    st->perturb = (Perturbation)c->method.perturb;
    stage_set_act_type(st, run_plan(c, 1).activations);
    if (K) stage_set_tangent_rank(st, c->method.tangent_rank);
    if (K && (rc = stage_set_local_groups(st, c->method.local_groups, c->training.seed, err)))
        stage_free(st);
    return rc;
}

int pipeline_init(Pipeline *p, const Backend *be, const Config *c, const Model *m,
                  const int *first, Transport *t, const Dataset *train,
                  const LayerStreams *streams, int want_stats, OpCostSource costs, FgError *err) {
    memset(p, 0, sizeof *p);
    int s = t->stage, N = c->training.micro_batches, B = c->training.micro_batch, rc;
    p->be = be, p->cfg = c, p->model = m, p->tr = t, p->data = train, p->upd.want_stats = want_stats;
    p->is_first = s == 0, p->is_last = s == t->stages - 1, p->layout = first;
    p->cost_source = costs;
    p->run = run_plan(c, t->replicas);
    p->K = p->run.tangents;
    p->upd.c_scale = 1.0f;
    p->need = layer_needs(c);
    // Before the stage's first buffer: what the process holds besides them.
    p->runtime = mem_runtime_bytes(c);
    mem_account_add(&p->mem, MEM_RUNTIME, p->runtime);
    if (layer_plan_of(m, m->n_layers - 1).scores && !be->head_forward)
        return fg_fail(err, FG_ERR_INPUT, "the %s backend has no fused head and loss (a model "
                       "built with fused_head; the run plan keeps it unfused there)", be->name);
    if (N > SCHED_MAX_MICROBATCHES)
        return fg_fail(err, FG_ERR_INPUT, "micro_batches: %d is more than %d", N, SCHED_MAX_MICROBATCHES);
    if ((rc = pipeline_stage_init(&p->stage, be, c, m, first[s], first[s + 1], err))) return rc;
    p->n = p->stage.param_count;
    p->loss = loss_end_of(p);
    p->largest = model_largest_block(m, first[s], first[s + 1]);  // a row block of a table in blocks
    p->largest_trained = model_largest_trained_block(m, first[s], first[s + 1]);
    size_t width = (size_t)m->max_width;
    p->work.act_stride = p->work.adj_stride = (size_t)B * width;
    p->work.tan_stride = (size_t)B * width * p->K;
    p->work.x_stride = (size_t)B * m->in_features;
    // Messages, and evaluation's inputs on every stage.
    p->msg.slot_bytes = message_slot_bytes(&p->stage, p->K, B);
    int streams_here = 0;
    if ((rc = source_choose(p, streams, &streams_here, err))) return rc;
    p->stage.local_keeps = streams_here;
    if (p->run.saves_inputs && streams_here && t->replicas > 1)
        return fg_fail(err, FG_ERR_INPUT, "stage %d streams its layers: perturb = activity out of "
                       "core runs with replicas = 1 only", s);
    const int calibrates = !pipeline_calibration_off(p);
    const SourceKind *kind = &source_kinds[streams_here];
    if (costs.given) memcpy(p->tt.costs, costs.given, sizeof(double) * N_OP_COSTS * (size_t)t->stages);
    else if ((rc = measure_all_costs(p, p->tt.costs, kind, err))) return rc;
    if ((rc = build_timetable(p, p->tt.costs, calibrates, err))) return rc;
    if (streams_here) source_streamed_in_flight(p, &p->tt.sched, s);
    if ((rc = kind->open(p, streams, err))) return rc;
    count_source(p);
    update_plan(p);
    stash_policy_init(p);
    if (streams && streams->resume && (rc = pipeline_refresh_ref(p, err))) return rc;
    plan_stage(p);
    alloc_buffers(p);
    if (calibrates && (rc = calibrate_timetable(p, p->tt.costs, err))) return rc;
    if ((rc = pipeline_check_every_stage_learns(c, &p->tt.sched, err))) return rc;
    eval_pass_plan(p, pool_bytes(p));
    p->upd.stats.estimate_norm = p->upd.stats.exact_norm = p->upd.stats.cos_estimate_exact = NAN;
    p->upd.stats.cos_fg_exact = p->upd.stats.variance_reduction = p->upd.stats.cv_beta_median = NAN;
    return FG_OK;
}

int pipeline_free(Pipeline *p, FgError *err) {
    const Backend *be = p->be;
    if (!be) return FG_OK;
    int rc = FG_OK;
    const float *lent = p->src.layer_buffer;  // the source's (alloc_buffers), freed by its close
    if (p->src.ctx) {
        char who[48];
        snprintf(who, sizeof who, p->tr->replicas > 1 ? "stage %d replica %d" : "stage %d",
                 p->tr->stage, p->tr->replica);
        p->src.report(&p->src, who);
        rc = p->src.close(&p->src, err);
    }
    for (int i = 0; i <= SCHED_MAX_LAG; i++)
        for (int b = 0; b < SCHED_MAX_MICROBATCHES; b++) {
            be->free(be, p->pool.stash[i][b]);
            be->free(be, p->pool.bw_adj[i][b]);
        }
    for (int i = 0; i < p->pool.n_free_stash; i++) be->free(be, p->pool.free_stash[i]);
    for (int i = 0; i < p->pool.n_free_adj; i++) be->free(be, p->pool.free_adj[i]);
    for (int i = 0; i < p->pool.n_free_input; i++) be->free(be, p->pool.free_input[i]);
    const LaneBuffers *w = &p->work;
    void *on_backend[] = {w->act[0], w->act[1], w->tan[0], w->tan[1], w->adj[0], w->adj[1],
                          w->x_in, w->labels, p->msg.inbox, p->msg.outbox,
                          p->pool.dz[0], p->pool.dz[1], p->pool.dz[2],
                          p->upd.estimate != lent ? p->upd.estimate : NULL,
                          p->upd.scratch != lent ? p->upd.scratch : NULL,
                          p->saved.blocks[0], p->saved.blocks[1], p->saved.work, p->saved.widened,
                          p->saved.local_input, p->saved.local_estimate,
                          p->upd.delayed[0], p->upd.delayed[1], p->upd.delayed[2],
                          p->stage.not_finite};
    for (size_t i = 0; i < sizeof on_backend / sizeof on_backend[0]; i++) be->free(be, on_backend[i]);
    void *on_host[] = {w->host_x, w->host_labels, w->loss_d, p->pool.free_stash, p->pool.free_adj,
                       p->pool.free_input,
                       p->pool.keeps, p->tt.taker_lag, p->scalars, p->not_finite_read,
                       p->upd.pending.coeff, p->upd.layer, p->tt.measured, p->host_layer[0],
                       p->host_layer[1], p->host_layer[2], p->host_layer[3],
                       p->saved.lane_labels, w->rows_state, p->tt.ends.wrap_blocks};
    for (size_t i = 0; i < sizeof on_host / sizeof on_host[0]; i++) fg_free(on_host[i]);
    free(w->lanes);
    cv_scale_free(&p->upd.cv);
    message_plan_free(&p->msg.plan);
    for (int i = 0; i <= SCHED_MAX_LAG; i++) exec_plan_free(&p->tt.plans[i]);
    stage_free(&p->stage);
    schedule_free(&p->tt.sched);
    memset(p, 0, sizeof *p);
    return rc;
}
