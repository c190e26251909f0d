// Cutting the model into this run's stages. boundaries=auto balances the work of a step as
// timed on this machine: parameter counts miss that tangent generation and small layers cost
// differently per parameter (the MLP's 10-class head is nearly free).
#include <stdlib.h>
#include <string.h>

#include "op_cost.h"
#include "partition.h"
#include "train_internal.h"

// A layer's seconds of work in one step of one replica: N F ops and one U pass when the
// timetable is made of those (fg, fg+bp: Bi and Bw go into the bubbles), N F+Bi+Bw ops and U
// for bp.
static double step_work(const Config *c, const double cost[N_OP_COSTS]) {
    double f = cost[COST_F] + (c->method.mode == MODE_BP ? cost[COST_BI] + cost[COST_BW] : 0.0);
    return c->training.micro_batches * f + cost[COST_U];
}

int layout_time_layers(const Config *c, const Backend *be, const Model *m, int replicas,
                       double *cost, FgError *err) {
    OptimizerConfig oc = config_optimizer(c);
    CostSetup setup = {.rows = c->training.micro_batch, .with_ref = config_dots_reference(c),
                       .n_mb = config_update_microbatches(c, replicas), .seed = c->training.seed,
                       .perturb = (Perturbation)c->method.perturb, .tangent_rank = c->method.tangent_rank,
                       .local_groups = c->method.local_groups, .optimizer = &oc};
    return model_measure_layer_costs(be, m, c->method.mode == MODE_BP ? 0 : c->method.tangents,
                                     &setup, cost, err);
}

int layout_is_timed(const Config *c, int M) {
    return strcmp(c->layout.boundaries, "auto") == 0 && M > 1 && c->layout.mem_budget <= 0;
}

int layout_cut(const Config *c, const Model *m, int M, const double *layer_cost, int *layout,
               double *work, FgError *err) {
    double layer_work[MODEL_MAX_LAYERS];
    if (!layer_cost) return partition_layers(m, M, c->layout.boundaries, NULL, layout, err);
    for (int l = 0; l < m->n_layers; l++) layer_work[l] = step_work(c, layer_cost + (size_t)l * N_OP_COSTS);
    int rc = partition_layers(m, M, c->layout.boundaries, layer_work, layout, err);
    for (int s = 0; s < M && !rc && work; s++) {
        work[s] = 0.0;
        for (int l = layout[s]; l < layout[s + 1]; l++) work[s] += layer_work[l];
    }
    return rc;
}

typedef struct {
    const Config *c;
    const TrainEnv *e;
    const Model *m;
    double *cost;
} LayerTiming;

static int time_layers(void *arg, FgError *err) {
    LayerTiming *lt = arg;
    return layout_time_layers(lt->c, lt->e->be, lt->m, lt->e->tr->replicas, lt->cost, err);
}

// Every rank times every layer, in turns, and one sum gives everyone the mean, so that all
// ranks cut alike. Out-of-core runs cut by parameter count: timing would read the stores.
int layout_plan(const Config *c, const TrainEnv *e, const Model *m, TrainResult *res, FgError *err) {
    Transport *t = e->tr;
    int M = t->stages, L = m->n_layers, world = M * t->replicas, rc;
    const int timed = layout_is_timed(c, M);
    res->layout_by = strcmp(c->layout.boundaries,
                            "auto") ? "boundaries" : timed ? "measured work" : "parameters";
    if (!timed) return layout_cut(c, m, M, NULL, res->layout, NULL, err);
    double *cost = calloc((size_t)L * N_OP_COSTS, sizeof(double));
    LayerTiming lt = {c, e, m, cost};
    rc = measure_in_turns(t, time_layers, &lt, err);
    if (!rc) rc = t->allreduce_sum_world(t, cost, L * N_OP_COSTS, err);
    for (int i = 0; i < L * N_OP_COSTS; i++) cost[i] /= world;
    if (!rc) rc = layout_cut(c, m, M, cost, res->layout, res->per_stage.work, err);
    free(cost);
    return rc;
}
