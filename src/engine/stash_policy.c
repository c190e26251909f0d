// What a stage keeps from F (or Bi) to its backward ops, two ways (StashPolicy): every layer's
// input, written by F as it runs; or the stage's input alone (recompute = stage), from which
// each backward op reruns F into a stash of its own. Bi keeps the adjoints Bw needs until Bw:
// every parameter layer's output adjoint, or (recompute) the stage's, from which Bw redoes Bi.
// Freed buffers are reused, so memory grows with the number in flight, not with N; their bytes
// go into the stage's account (mem_account.h) as they are taken and given back.
#include "stash_policy.h"

#include "engine_ops.h"

int stash_ring(const Pipeline *p, long step) { return (int)(step % p->pool.rings); }

// A buffer from the free ones, or a new one: one more at once unless it replaces one trimmed.
static float *pool_take(Pipeline *p, MemOwner owner, size_t floats, float **free, int *n_free,
                        int *n_alloc, int *n_trimmed) {
    mem_account_add(&p->mem, owner, sizeof(float) * (double)floats);
    if (*n_free) return free[--*n_free];
    if (*n_trimmed) --*n_trimmed;
    else ++*n_alloc;
    return backend_alloc_floats(p->be, floats);
}

static void pool_give(Pipeline *p, MemOwner owner, size_t floats, float **free, int *n_free, float *buf) {
    mem_account_add(&p->mem, owner, -(double)sizeof(float) * (double)floats);
    free[(*n_free)++] = buf;
}

static float *stash_take(Pipeline *p) {
    StashPool *q = &p->pool;
    return pool_take(p, MEM_STASH, p->stash.stash_floats, q->free_stash, &q->n_free_stash, &q->n_stash_alloc,
                     &q->n_trimmed[0]);
}

static float *input_take(Pipeline *p) {
    StashPool *q = &p->pool;
    return pool_take(p, MEM_STASH, p->stash.input_floats, q->free_input, &q->n_free_input, &q->n_input_alloc,
                     &q->n_trimmed[1]);
}

static float *adj_take(Pipeline *p) {
    StashPool *q = &p->pool;
    return pool_take(p, MEM_BW_ADJOINTS, p->stash.adj_floats, q->free_adj, &q->n_free_adj, &q->n_adj_alloc,
                     &q->n_trimmed[2]);
}

// ---------------------------------------------------------------------------------------------
// Every layer's input: F writes each layer's output into the stash, as the next one's input.

static float *hold_stash(Pipeline *p, Lane *a) { return a->stash = stash_take(p); }

static void take_stash(Pipeline *p, Lane *a, float *held) {
    (void)p;
    a->stash = held;
}

static void output_adjoint_of_message(Pipeline *p, Lane *a, const float *dy) {
    (void)p;
    a->dy = dy;  // Bw: none (it reads the adjoints Bi kept, layer by layer)
}

static float *stash_layer_input(const Pipeline *p, const Lane *a, int l) {
    return a->stash + stage_stash_offset(&p->stage, l, p->cfg->training.micro_batch);
}

// In the type of the next layer's input (stage_adjoint_offset).
static float *layer_bw_adjoint(const Pipeline *p, const Lane *a, int l) {
    if (!a->bw_adjoints || !p->stage.plan[l].trains) return NULL;
    return a->bw_adjoints + stage_adjoint_offset(&p->stage, l, p->cfg->training.micro_batch);
}

static int rerun_nothing(Pipeline *p, int n, FgError *err) {
    (void)p, (void)n, (void)err;
    return FG_OK;
}

// ---------------------------------------------------------------------------------------------
// recompute = stage: F holds the stage's input [B, in] alone, until the micro-batch's last
// backward op; every B, Bi and Bw op reruns the layers after it into a stash of its own.

static float *hold_input(Pipeline *p, Lane *a) { return a->input = input_take(p); }

static void take_input(Pipeline *p, Lane *a, float *held) {
    a->input = held;
    a->stash = held ? stash_take(p) : NULL;
}

// Bi keeps the stage's output adjoint as the message holds it (the message's slot is reused),
// Bw redoes Bi from it.
static void output_adjoint_kept(Pipeline *p, Lane *a, const float *dy) {
    if (a->kind == OP_BW) {
        a->dy = a->bw_adjoints;
        return;
    }
    a->dy = dy;
    if (a->bw_adjoints) p->be->copy(p->be, a->bw_adjoints, dy, p->stash.adj_floats * sizeof(float));
}

// The input F held, and the rerun's layers after it.
static float *rerun_layer_input(const Pipeline *p, const Lane *a, int l) {
    const Stage *st = &p->stage;
    const int B = p->cfg->training.micro_batch;
    return l == st->first ? a->input : a->stash + stage_stash_offset(st, l, B) - p->stash.input_floats;
}

static float *no_bw_adjoint(const Pipeline *p, const Lane *a, int l) {
    (void)p, (void)a, (void)l;
    return NULL;
}

// The stash of each lane (B, Bi or Bw), rerun from the input its F held with the weights F ran
// with (those B differentiates at), as F computed it: F's primal is the plain forward with or
// without tangents (every layer's jvp calls its forward). The stage's last layer is not rerun:
// B reads layer inputs only, and its output went to the loss or the next stage.
static int rerun_forward(Pipeline *p, int n, FgError *err) {
    Stage *st = &p->stage;
    int rc = FG_OK;
    for (int l = st->first; l < st->last - 1 && !rc; l++) {
        // A rerun steps nothing: the parameters alone (the B after it reads the rest).
        unsigned parts = p->model->layers[l].param_count ? LAYER_WEIGHTS | LAYER_STEP | LAYER_PARAMS_ONLY : 0;
        LayerSlot s = {0};
        if (parts && (rc = layers_acquire(p, l, 1, parts, &s, err))) break;
        const size_t in = (size_t)p->model->layers[l].in * p->cfg->training.micro_batch;
        const size_t out = (size_t)p->model->layers[l].out * p->cfg->training.micro_batch;
        for (int i = 0; i < n; i++) {
            const Lane *a = &p->work.lanes[i];
            // BF16 activations pass through the lanes' buffers as floats (F's, free here).
            float *x_work = p->work.act[(l - st->first + 1) & 1] + (size_t)i * p->work.act_stride;
            float *kept = rerun_layer_input(p, a, l + 1);
            float *y_work = p->work.act[(l - st->first) & 1] + (size_t)i * p->work.act_stride;
            float *y = stage_act_buffer(st, l + 1, kept, y_work);
            stage_layer_forward(st, l, a->lag ? s.prev[a->lag - 1] : s.params,
                                a->lag ? s.prev16[a->lag - 1] : s.params16, NULL, NULL,
                                stage_act_load(st, l, rerun_layer_input(p, a, l), x_work, in), NULL, y,
                                NULL, a->rows);
            stage_act_keep(st, l + 1, kept, y, out);
        }
        if (parts) rc = layers_release(p, l, parts, 0, err);
    }
    return rc;
}

// ---------------------------------------------------------------------------------------------

// The policies by what F keeps (RunPlan.stash); their sizes are the stage's (stash_sizes).
static const StashPolicy policies[N_STASH_KINDS] = {
    [KEEP_LAYER_INPUTS] = {
        .half = {[OP_B] = HALF_BOTH, [OP_BI] = HALF_INPUT, [OP_BW] = HALF_WEIGHT},
        .hold = hold_stash, .take = take_stash, .output_adjoint = output_adjoint_of_message,
        .layer_input = stash_layer_input, .bw_adjoint = layer_bw_adjoint, .rerun = rerun_nothing},
    [KEEP_STAGE_INPUT] = {
        .half = {[OP_B] = HALF_BOTH, [OP_BI] = HALF_INPUT, [OP_BW] = HALF_BOTH},
        .hold = hold_input, .take = take_input, .output_adjoint = output_adjoint_kept,
        .layer_input = rerun_layer_input, .bw_adjoint = no_bw_adjoint, .rerun = rerun_forward},
};

void stash_policy_init(Pipeline *p) {
    const StashSizes kept = stash_sizes(p->run.stash, &p->stage, p->cfg->training.micro_batch, p->is_last);
    p->stash = policies[p->run.stash];
    p->stash.stash_floats = kept.stash;
    p->stash.input_floats = kept.input;
    p->stash.adj_floats = kept.adjoints;
}

void stash_hold(Pipeline *p, long step, Lane *a) {
    p->pool.stash[stash_ring(p, step)][a->microbatch] = p->stash.hold(p, a);
}

int stash_backward_lane(Pipeline *p, long step, Lane *a, FgError *err) {
    const int B = p->cfg->training.micro_batch, C = pipeline_adjoint_width(p);
    const int r = stash_ring(p, step - a->lag), mb = a->microbatch;
    const int keeps_adjoints = p->stash.adj_floats > 0;
    p->stash.take(p, a, p->pool.stash[r][mb]);
    if (a->kind == OP_BI && keeps_adjoints) p->pool.bw_adj[r][mb] = a->bw_adjoints = adj_take(p);
    if (a->kind == OP_BW) a->bw_adjoints = p->pool.bw_adj[r][mb], p->pool.bw_adj[r][mb] = NULL;
    if (a->kind != OP_BI) p->pool.stash[r][mb] = NULL;  // the lane's last use
    const int no_bw_adjoints = a->kind == OP_BW && keeps_adjoints && !a->bw_adjoints;
    if (!a->stash || no_bw_adjoints)
        return fg_fail(err, FG_ERR_INTERNAL, "stage %d: %s of micro-batch %d (lag %d) has no stash",
                       p->tr->stage, op_kind_name(a->kind), mb, a->lag);
    if (p->is_last) {
        a->dy = p->pool.dz[r] + (size_t)mb * B * p->model->tokens * C;
        return FG_OK;
    }
    const void *msg = NULL;
    int rc = a->kind == OP_BW ? FG_OK : messages_take(p, step, &msg, err);
    if (rc) return rc;
    p->stash.output_adjoint(p, a, msg);
    // As floats: a message (and Bi's copy of it) holds the stage's output type, widened into the
    // lanes' second adjoint buffer (the stage's last layer writes its input adjoint in the first).
    const Stage *st = &p->stage;
    float *scratch = p->work.adj[1] + (size_t)(a - p->work.lanes) * p->work.adj_stride;
    const size_t n = (size_t)B * p->model->layers[st->last - 1].out;
    if (a->dy) a->dy = stage_act_load(st, st->last, a->dy, scratch, n);
    return FG_OK;
}

void stash_lane_done(Pipeline *p, Lane *a) {
    StashPool *q = &p->pool;
    // Bi leaves the stash to Bw, but a rerun's (a->input held) is its own.
    if (a->kind != OP_BI || a->input)
        pool_give(p, MEM_STASH, p->stash.stash_floats, q->free_stash, &q->n_free_stash, a->stash);
    if (a->kind != OP_BI && a->input)
        pool_give(p, MEM_STASH, p->stash.input_floats, q->free_input, &q->n_free_input, a->input);
    if (a->kind == OP_BW && a->bw_adjoints)
        pool_give(p, MEM_BW_ADJOINTS, p->stash.adj_floats, q->free_adj, &q->n_free_adj, a->bw_adjoints);
}

void stash_pool_trim(Pipeline *p) {
    StashPool *q = &p->pool;
    float **free[3] = {q->free_stash, q->free_input, q->free_adj};
    int *n_free[3] = {&q->n_free_stash, &q->n_free_input, &q->n_free_adj};
    for (int k = 0; k < 3; k++)
        for (; *n_free[k]; q->n_trimmed[k]++) p->be->free(p->be, free[k][--*n_free[k]]);
}
