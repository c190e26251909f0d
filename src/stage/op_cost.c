// Timing each layer's ops on its own, for the cut into stages.
#include "op_cost.h"

#include <math.h>
#include <stdlib.h>

#include "perturbation.h"
#include "progress.h"

const char *const op_cost_keys[N_OP_COSTS] = {"f", "bi", "bw", "u", "zero"};

// The timetable packs ops back to back, so it plans with their typical cost (the median), not
// their best: a plan of best cases overruns on every stage it fills.
enum { COST_ROUNDS = 5 };

// What op U reads: the tangents' coefficients and what F saved (zeros: values do not change
// the cost).
typedef struct {
    float *coeff, *saved, *work, *widened;
} UpdateInputs;

static UpdateInputs update_inputs(const Stage *st, int n_mb, int rows) {
    UpdateInputs in = {.coeff = fg_alloc_floats((size_t)FG_MAX(n_mb, 1) * rows * FG_MAX(st->tangents, 1))};
    size_t saved = st->tangents && n_mb ? stage_saved_floats(st, n_mb * rows) : 0;
    if (!saved) return in;
    in.saved = backend_alloc_floats(st->be, saved);
    in.work = backend_alloc_floats(st->be, (size_t)n_mb * rows * st->model->max_width);
    size_t widened = stage_saved_widened_floats(st, n_mb * rows);
    if (widened) in.widened = backend_alloc_floats(st->be, widened);
    return in;
}

// Op U: every layer's estimate from its perturbation, then the optimizer's step (state: its
// buffers). The weights held for lagged ops age by pointer swaps: free.
static int update(const Stage *st, const CostSetup *setup, const UpdateInputs *in, float *w,
                  float *g, float *state, FgError *err) {
    const Backend *be = st->be;
    int n_mb = setup->n_mb, rows = setup->rows;
    for (int l = st->first; st->tangents && n_mb && l < st->last; l++) {
        const Layer *L = &st->model->layers[l];
        if (!st->plan[l].trains) continue;
        PerturbEstimate e = {.seed = setup->seed, .replica_microbatches = n_mb,
                             .all_microbatches = n_mb, .rows = rows, .coeff = in->coeff,
                             .fg_weight = 1.0f, .work = in->work, .widened = in->widened, .first = 0, .count = L->param_count,
                             .saved = in->saved ? in->saved + stage_saved_offset(st, l, n_mb * rows) : NULL};
        stage_perturbation(st, l)->estimate(st, l, &e, g + (L->param_offset - st->param_base));
    }
    if (setup->optimizer)
        be->optimizer_step(be, setup->optimizer, 0, setup->optimizer->lr, w, w, g, 1.0f, state,
                           st->param_count, st->param_count);
    return be->sync(be, err);
}

// The last stage's op F also scores its micro-batch (the loss, or with tangents its directional
// derivatives) and, for a micro-batch B ops will take, forms dz: with GPT-2's 50257 columns
// these cost several times the layers. dz goes to Bi here (only B ops' micro-batches pay it).
// Returns the seconds of dz.
static double time_loss(Stage *st, const float *y, const float *ydot, const Label *labels,
                        float *dz, int rows) {
    const Backend *be = st->be;
    const Model *m = st->model;
    int n = rows * m->tokens, K = ydot ? st->tangents : 0;
    float *d = K ? fg_alloc_floats((size_t)K) : NULL;
    if (K) be->loss_jvp(be, y, ydot, labels, n, model_logit_rows(m), K, d);
    else be->loss_forward(be, y, labels, n, model_logit_rows(m), NULL);
    fg_free(d);
    double t0 = wall_seconds();
    be->loss_backward(be, y, labels, n, model_logit_rows(m), dz);
    return wall_seconds() - t0;
}

static int stage_measure_costs(Stage *st, const CostSetup *setup, double cost[N_OP_COSTS],
                               FgError *err) {
    const Backend *be = st->be;
    const Model *m = st->model;
    int K = st->tangents, rows = setup->rows, n_mb = setup->n_mb, rc = FG_OK;
    size_t in = (size_t)rows * m->layers[st->first].in;
    float *x = backend_alloc_floats(be, in * (1 + K));
    float *stash = backend_alloc_floats(be, stage_stash_floats(st, rows));
    float *adjoints = backend_alloc_floats(be, stage_adjoint_floats(st, rows));
    float *dy = backend_alloc_floats(be, (size_t)rows * m->max_width);
    const int scores = st->last == m->n_layers;
    Label *labels = scores ? be->alloc(be, (size_t)rows * m->tokens * sizeof(Label)) : NULL;
    if (labels) be->zero(be, labels, (size_t)rows * m->tokens * sizeof(Label));
    float *dx = backend_alloc_floats(be, in);
    float *w = backend_alloc_floats(be, st->param_count + 1);
    // A lagged Bi differentiates at an older weight version, which the step's other ops have
    // pushed out of the caches: timed at the weights F just read, Bi ran 15% fast.
    float *w_lagged = setup->lagged_weights ? backend_alloc_floats(be, st->param_count + 1) : NULL;
    float *g = backend_alloc_floats(be, st->param_count + 1);
    float *ref = setup->with_ref && K ? backend_alloc_floats(be, st->param_count + 1) : NULL;
    double *ref_dots = calloc((size_t)FG_MAX(K, 1), sizeof(double));
    UpdateInputs u_in = update_inputs(st, n_mb, rows);
    int n_state = setup->optimizer ? optimizer_state_buffers(setup->optimizer->kind) : 0;
    float *state = n_state ? backend_alloc_floats(be, (size_t)n_state * st->param_count) : NULL;
    TangentKey key = tangent_key(setup->seed, 0, 0, 0);
    // A fused head scores in its layer's F and recomputes its logits in Bi and Bw: no dz.
    float *head_d = fg_alloc_floats((size_t)FG_MAX(K, 1) * rows * m->tokens);  // activity: per row
    HeadScore head = {.labels = labels, .weight = 1.0f, .d = head_d};
    const int fused = scores && st->plan[st->last - 1].scores;
    ForwardCall f = {.key = K ? &key : NULL, .ref = ref, .ref_dots = ref_dots,
                     .head = fused ? &head : NULL};
    double times[N_OP_COSTS][COST_ROUNDS] = {{0}};
    const int has_u = (K && n_mb) || setup->optimizer;
    for (int r = 0; r < COST_ROUNDS && !rc; r++) {
        const float *y, *ydot;
        double t[N_OP_COSTS + 1];
        t[0] = wall_seconds();
        stage_forward_call(st, w, &f, x, setup->with_xdot && K ? x + in : NULL, rows, stash, &y,
                           &ydot);
        double dz_seconds = scores && !fused ? time_loss(st, y, K ? ydot : NULL, labels, dy, rows) : 0.0;
        rc = be->sync(be, err);
        t[1] = wall_seconds() - dz_seconds;  // dz counts in Bi, below
        // B's rerun: the plain forward, in Bi's time (a split Bw redoes Bi: the timetable plans
        // it at cost_bi + cost_bw, ScheduleSpec.bw_redoes_bi)
        for (int i = 0; i < setup->reruns; i++)
            stage_forward_call(st, w_lagged ? w_lagged : w, &(ForwardCall){.head = f.head}, x, NULL,
                               rows, stash, &y, &ydot);
        stage_backward_input(st, w_lagged ? w_lagged : w, stash, dy, setup->with_xdot ? dx : NULL,
                             adjoints, rows);
        if (!rc) rc = be->sync(be, err);
        t[2] = wall_seconds();
        stage_backward_weight(st, w_lagged ? w_lagged : w, stash, adjoints, g, rows);
        if (!rc) rc = be->sync(be, err);
        t[3] = wall_seconds();
        int rc2 = update(st, setup, &u_in, w, g, state, err);
        if (!rc) rc = rc2;
        t[4] = wall_seconds();
        be->zero(be, g, st->param_count * sizeof(float));
        if (!rc) rc = be->sync(be, err);
        t[5] = wall_seconds();
        for (int i = 0; i < N_OP_COSTS; i++) times[i][r] = has_u || i != COST_U ? t[i + 1] - t[i] : 0.0;
    }
    for (int i = 0; i < N_OP_COSTS; i++) {
        cost[i] = fg_median(times[i], COST_ROUNDS);
        for (int r = 0; r < COST_ROUNDS && setup->best; r++) cost[i] = fmin(cost[i], times[i][r]);
    }
    fg_free(head_d);
    void *bufs[] = {x,   w_lagged,   stash,     adjoints,        dy,    dx,    w,
                    g,   ref,        u_in.saved, u_in.work, u_in.widened, state, labels};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]);
    fg_free(u_in.coeff);
    free(ref_dots);
    return rc;
}

int model_measure_layer_costs(const Backend *be, const Model *m, int K, const CostSetup *setup,
                              double *cost, FgError *err) {
    int rc = FG_OK;
    for (int l = 0; l < m->n_layers && !rc; l++) {
        Stage st;
        if ((rc = stage_init(&st, be, m, l, l + 1, setup->rows, K, err))) break;
        st.perturb = setup->perturb;
        if (K) stage_set_tangent_rank(&st, setup->tangent_rank);
        CostSetup layer = *setup;
        layer.with_xdot = l > 0 && !setup->local_groups;
        rc = stage_measure_costs(&st, &layer, cost + (size_t)l * N_OP_COSTS, err);
        stage_free(&st);
    }
    return rc;
}

int measure_in_turns(Transport *t, int (*measure)(void *arg, FgError *err), void *arg,
                     FgError *err) {
    int me = t->replica * t->stages + t->stage, world = t->stages * t->replicas, rc = FG_OK;
    for (int turn = 0; turn < world; turn++) {
        double failed = 0.0;
        if (turn == me && (rc = measure(arg, err))) failed = 1.0;
        // The turn's end; a failure ends every rank's turns (the failing rank keeps its error).
        int rc2 = t->allreduce_sum_world(t, &failed, 1, err);
        if (rc || rc2) return rc ? rc : rc2;
        if (failed > 0) return fg_fail(err, FG_ERR_INPUT, "timing the ops failed on another rank");
    }
    return FG_OK;
}
