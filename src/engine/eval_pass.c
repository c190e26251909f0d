// Evaluation in passes (eval_pass.h): pipeline_evaluate (pipeline.h).
#include "eval_pass.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine_ops.h"
#include "pipeline.h"
#include "progress.h"
#include "slot_plan.h"
#include "stash_policy.h"

// message_tag's step field of a pass's status (a window's message has 0).
enum { STATUS_TAG = 1 };

// A window's input: the data's features (stage 0) or the stage before's output.
static size_t input_floats(const Pipeline *p) {
    const int B = p->cfg->training.micro_batch;
    return FG_MAX(p->work.x_stride, (size_t)B * p->model->layers[p->stage.first].in);
}

// A fused head in row blocks: a window's running softmax (else 0).
static size_t rows_state(const Pipeline *p) {
    return stage_rows_state_bytes(&p->stage, p->stage.last - 1, p->cfg->training.micro_batch);
}

void eval_pass_plan(Pipeline *p, double lent_bytes) {
    EvalPlan *e = &p->eval;
    int group = 1;
    for (int ph = 0; ph < p->tt.sched.n_phases; ph++) group = FG_MAX(group, p->tt.plans[ph].max_group);
    e->group = group;
    e->window_bytes = sizeof(float) * (2.0 * (double)p->work.act_stride + (double)input_floats(p)) +
                      (double)rows_state(p);
    e->lent_bytes = lent_bytes;
    e->windows = (int)FG_MAX((double)group, FG_MIN(floor(e->lent_bytes / e->window_bytes), INT_MAX / 2));
    if (!p->src.io_stats || p->tr->replica) return;  // a stage that reads its layers says it
    double store = slot_plan_pass_bytes(p->cfg, p->model, p->stage.first, p->stage.last);
    char where[96];
    if (e->windows > group)
        snprintf(where, sizeof where, "%.2f MB each, in the %.1f MB its stashes take in a step",
                 e->window_bytes / 1e6, e->lent_bytes / 1e6);
    else
        snprintf(where, sizeof where, "the step's lanes");
    fprintf(stderr, "fgpipe: stage %d evaluates up to %d windows a pass (%s): its layers (%.0f bytes) "
            "are read once a pass, not once a window\n", p->tr->stage, e->windows, where, store);
}

// One evaluation: its windows (micro-batches of the set) in passes of `windows`.
typedef struct {
    Pipeline *p;
    const Dataset *ds;
    size_t chunks;            // windows of the set
    int windows;              // a pass's at most, the same on every stage
    int own;                  // the pass has buffers of its own (else the step's lanes and inbox)
    Lane *lanes;
    float *inputs;            // [windows][in_stride]
    size_t in_stride;
    LaneBuffers step_work;    // the step's lane buffers, back after the evaluation
    double bytes;             // of the buffers of its own
    double totals[3];         // loss * rows, hits, stopped
} EvalRun;

// This evaluation's windows a pass, the same on every stage so that their passes pair up: the
// plan's, less the stashes the pool holds now (a step's to come, with a lag), at most the set's.
static int agree_windows(EvalRun *r, FgError *err) {
    Pipeline *p = r->p;
    const EvalPlan *e = &p->eval;
    // What the pool has held at once (never more than planned), less what it holds now: the
    // windows take no memory the step has not taken.
    const StashPool *q = &p->pool;
    const double pool = sizeof(float) * ((double)q->n_stash_alloc * p->stash.stash_floats +
                                         (double)q->n_input_alloc * p->stash.input_floats +
                                         (double)q->n_adj_alloc * p->stash.adj_floats);
    const double held = p->mem.current[MEM_STASH] + p->mem.current[MEM_BW_ADJOINTS];
    const double fits = floor((FG_MIN(e->lent_bytes, pool) - held) / e->window_bytes);
    double mine = FG_MAX((double)e->group, FG_MIN((double)e->windows, fits));
    mine = FG_MIN(mine, (double)FG_MAX(r->chunks, 1));
    const int M = p->tr->stages;
    double *all = calloc((size_t)M, sizeof(double));
    all[p->tr->stage] = mine;
    int rc = p->tr->allreduce_sum(p->tr, all, M, err);
    for (int s = 0; s < M; s++) mine = FG_MIN(mine, all[s]);
    free(all);
    r->windows = (int)mine;
    return rc;
}

// Passes of more windows than the step's lanes hold take buffers of their own, in the memory
// of the pool's idle stashes (freed first); the others use the step's lanes and inbox.
static void take_buffers(EvalRun *r) {
    Pipeline *p = r->p;
    r->own = r->windows > p->eval.group;
    if (!r->own) {
        r->lanes = p->work.lanes, r->inputs = (float *)p->msg.inbox;
        r->in_stride = p->msg.slot_bytes / sizeof(float);
        return;
    }
    stash_pool_trim(p);
    const size_t n = (size_t)r->windows, state = rows_state(p);
    r->step_work = p->work;
    r->in_stride = input_floats(p);
    r->lanes = calloc(n, sizeof(Lane));
    for (int i = 0; i < 2; i++) p->work.act[i] = backend_alloc_floats(p->be, n * p->work.act_stride);
    r->inputs = backend_alloc_floats(p->be, n * r->in_stride);
    p->work.rows_state = state ? fg_alloc_bytes(n * state) : NULL;
    r->bytes = (double)n * p->eval.window_bytes;
    mem_account_add(&p->mem, MEM_LANES, r->bytes);
}

static void give_back_buffers(EvalRun *r) {
    Pipeline *p = r->p;
    if (!r->own) return;
    for (int i = 0; i < 2; i++) p->be->free(p->be, p->work.act[i]);
    p->be->free(p->be, r->inputs);
    fg_free(p->work.rows_state);
    free(r->lanes);
    p->work = r->step_work;
    mem_account_add(&p->mem, MEM_LANES, -r->bytes);
}

static int window_rows(const EvalRun *r, size_t chunk) {
    const int rows = r->p->cfg->training.micro_batch;
    return (int)FG_MIN((size_t)rows, r->ds->count - chunk * rows);
}

// Window `chunk`'s input: the data, or the stage before's output (in the type of the stage's
// input).
static int window_input(EvalRun *r, size_t chunk, float *x, FgError *err) {
    Pipeline *p = r->p;
    const Dataset *ds = r->ds;
    const int rows = p->cfg->training.micro_batch, n = window_rows(r, chunk);
    if (p->is_first) {
        p->be->upload(p->be, x, ds->x + chunk * rows * ds->features, (size_t)n * ds->features * sizeof(float));
        return FG_OK;
    }
    return p->tr->recv(p->tr, p->tr->stage - 1, message_tag(MSG_EVAL, 0, (int)(chunk % 1024)), x,
                       messages_plain_bytes(p, p->stage.first, n), err);
}

// Window i's input x as floats (BF16 widened into the odd layers' buffer, as op F's lanes).
static const float *window_floats(const EvalRun *r, int i, const float *x) {
    const Pipeline *p = r->p;
    return stage_act_load(&p->stage, p->stage.first, x, p->work.act[1] + (size_t)i * p->work.act_stride,
                          (size_t)r->lanes[i].rows * p->model->layers[p->stage.first].in);
}

// Window `chunk`'s output (lane a): sent on in the next stage's input type, or scored into the
// totals by the loss end.
static int window_output(EvalRun *r, size_t chunk, const Lane *a, FgError *err) {
    Pipeline *p = r->p;
    const int n = window_rows(r, chunk), last = p->stage.last;
    if (!p->is_last) {
        stage_act_store(&p->stage, last, p->msg.outbox, a->x, (size_t)n * p->model->layers[last - 1].out);
        return p->tr->send(p->tr, p->tr->stage + 1, message_tag(MSG_EVAL, 0, (int)(chunk % 1024)), p->msg.outbox,
                           messages_plain_bytes(p, last, n), err);
    }
    p->loss->eval(p, r->ds, chunk, n, a, r->totals);
    return FG_OK;
}

// Before each pass's windows, a stage tells the next whether it stopped (then none follow).
static int send_status(EvalRun *r, int pass, int stopped, FgError *err) {
    Transport *t = r->p->tr;
    float v = (float)stopped;
    return t->send(t, t->stage + 1, message_tag(MSG_EVAL, STATUS_TAG, pass % 1024), &v, sizeof v, err);
}

static int recv_status(EvalRun *r, int pass, int *stopped, FgError *err) {
    Transport *t = r->p->tr;
    float v = 0.0f;
    int rc = t->recv(t, t->stage - 1, message_tag(MSG_EVAL, STATUS_TAG, pass % 1024), &v, sizeof v, err);
    *stopped = v != 0.0f;
    return rc;
}

// Pass `pass`, windows [w, w + n): their inputs, every layer once for all of them, their
// outputs. *up: the stage before stopped; *stopped: this stage stops (it or the one before).
static int run_pass(EvalRun *r, int pass, size_t w, int n, int *up, int *stopped, FgError *err) {
    Pipeline *p = r->p;
    int rc = p->is_first ? FG_OK : recv_status(r, pass, up, err);
    for (int i = 0; i < n && !rc && !*up; i++) {
        float *x = r->inputs + (size_t)i * r->in_stride;
        r->lanes[i] = (Lane){.rows = window_rows(r, w + i), .x = x};
        if (p->is_last)  // a fused head scores them in its layer
            r->lanes[i].labels = r->ds->labels + (w + i) * p->cfg->training.micro_batch * r->ds->tokens;
        rc = window_input(r, w + i, x, err);
        if (!rc) r->lanes[i].x = window_floats(r, i, x);
    }
    if (!rc && !*up && !pipeline_eval_stopping(p)) rc = ops_forward_layers(p, -1, r->lanes, n, err);
    *stopped = *up || pipeline_eval_stopping(p);  // read once the layers are done (or not begun)
    if (!rc && !p->is_last) rc = send_status(r, pass, *stopped, err);
    for (int i = 0; i < n && !rc && !*stopped; i++) rc = window_output(r, w + i, &r->lanes[i], err);
    return rc ? rc : p->be->sync(p->be, err);
}

// This stage stopped and the one before did not: its passes are taken (and dropped) until it
// stops too or its windows end, so that it never waits on a send.
static int drain(EvalRun *r, int pass, size_t w, FgError *err) {
    int rc = FG_OK, up = 0;
    for (; w < r->chunks && !rc && !up; w += (size_t)r->windows, pass++) {
        if ((rc = recv_status(r, pass, &up, err)) || up) break;
        for (int i = 0; i < (int)FG_MIN((size_t)r->windows, r->chunks - w) && !rc; i++)
            rc = window_input(r, w + i, r->inputs + (size_t)i * r->in_stride, err);
    }
    return rc;
}

// A streamed stage's line: the evaluation's reads against its bound, max(compute, I/O).
static void say_passes(const EvalRun *r, int passes, double seconds, const LayerStreamStats *before) {
    Pipeline *p = r->p;
    LayerStreamStats d;
    p->src.io_stats(&p->src, &d);
    d.read_bytes -= before->read_bytes, d.read_seconds -= before->read_seconds;
    d.write_bytes -= before->write_bytes, d.write_seconds -= before->write_seconds;
    d.busy_seconds -= before->busy_seconds, d.cpu_seconds -= before->cpu_seconds;
    d.wait_seconds -= before->wait_seconds;
    const IoBound b = layer_io_bound(&d, seconds, 1);
    const double bound = FG_MAX(b.compute_seconds, b.io_seconds);
    fprintf(stderr, "fgpipe: stage %d evaluation%s: %zu windows in %d passes of up to %d: read %.3f GB "
            "(%.0f bytes, %.3f GB a pass) in %.2f s; compute %.2f s, I/O %.2f s (%.2f GB/s read): "
            "bound / time %.2f\n", p->tr->stage, r->totals[2] > 0 ? " stopped by a signal" : "",
            r->chunks, passes, r->windows, d.read_bytes / 1e9, d.read_bytes,
            passes ? d.read_bytes / passes / 1e9 : 0.0, seconds, b.compute_seconds, b.io_seconds,
            b.read_bandwidth / 1e9, seconds > 0 ? bound / seconds : 0.0);
}

int pipeline_evaluate(Pipeline *p, const Dataset *ds, const volatile sig_atomic_t *stop, double *loss,
                      double *acc, int *stopped, FgError *err) {
    const int rows = p->cfg->training.micro_batch;
    EvalRun r = {.p = p, .ds = ds, .chunks = (ds->count + rows - 1) / rows};
    int rc = pipeline_apply_pending(p, err);
    if (!rc) rc = agree_windows(&r, err);
    if (rc) return rc;
    LayerStreamStats before = {0};
    if (p->src.io_stats) p->src.io_stats(&p->src, &before);
    const double t0 = wall_seconds();
    int up = 0, mine = 0, pass = 0;
    size_t w = 0;
    p->eval.stop = stop;
    // The passes are forward waves back to back: each reads on into the next one's first layers
    // (a table in row blocks from its block 0), never into a training wave.
    const WaveEnds training = p->tt.ends;
    p->tt.ends = (WaveEnds){.wraps = {1, 1},
                            .forward_parts = LAYER_WEIGHTS | (p->need.ref ? 0 : LAYER_PARAMS_ONLY)};
    take_buffers(&r);
    for (; w < r.chunks && !rc && !mine; w += (size_t)r.windows, pass++)
        rc = run_pass(&r, pass, w, (int)FG_MIN((size_t)r.windows, r.chunks - w), &up, &mine, err);
    if (!rc && mine && !up && !p->is_first) rc = drain(&r, pass, w, err);
    give_back_buffers(&r);
    p->tt.ends = training;
    p->eval.stop = NULL;
    r.totals[2] = mine;
    if (!rc) rc = p->tr->allreduce_sum(p->tr, r.totals, 3, err);
    *stopped = r.totals[2] > 0;
    const double labels = (double)ds->count * ds->tokens;
    *loss = *stopped ? NAN : r.totals[0] / labels;
    *acc = *stopped ? NAN : r.totals[1] / labels;
    if (!rc && p->src.io_stats) say_passes(&r, pass, wall_seconds() - t0, &before);
    return rc;
}
