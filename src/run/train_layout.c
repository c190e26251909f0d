// Cutting the model into this run's stages. boundaries=auto balances parameter counts, or the
// work of a step as timed on this machine where that is clearly better: parameter counts miss
// that tangent generation and small layers cost differently per parameter (a token table's
// lookup is nearly free), but timings are noisy, and the same config should cut alike.
#include <stdlib.h>
#include <string.h>

#include "op_cost.h"
#include "mem_account.h"
#include "partition.h"
#include "table_rows.h"
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
                       .local_groups = c->method.local_groups, .optimizer = &oc, .best = 1};
    return model_measure_layer_costs(be, m, c->method.mode == MODE_BP ? 0 : c->method.tangents,
                                     &setup, cost, err);
}

int layout_is_timed(const Config *c, int M) {
    return strcmp(c->layout.boundaries, "auto") == 0 && M > 1 && c->layout.mem_budget <= 0;
}

// The largest stage's work of the cut first[] when layer l costs w[l].
static double largest_stage(const double *w, const int *first, int M) {
    double most = 0.0;
    for (int s = 0; s < M; s++) {
        double sum = 0.0;
        for (int l = first[s]; l < first[s + 1]; l++) sum += w[l];
        most = FG_MAX(most, sum);
    }
    return most;
}

// Timings on a shared machine move by more than the cuts differ: two runs of one config cut
// apart (the main job's planned bubble was 37.9% in one, 59.6% in the other). The cut by
// parameter counts stands unless the cut by measured work makes the largest stage at least
// CUT_MARGIN faster under the same timings (the GPT's token table: many parameters, little work);
// under a load of 10 on 2 cores the main job's measured cut came out 26% faster on noise alone.
#define CUT_MARGIN 0.33

int layout_cut(const Config *c, const Model *m, int M, const double *layer_cost, int *layout,
               double *work, int *by_work, char *why, size_t why_size, FgError *err) {
    double layer_work[MODEL_MAX_LAYERS];
    int by_params[SCHED_MAX_STAGES + 1];
    if (by_work) *by_work = 0;
    if (why && why_size) why[0] = '\0';
    if (!layer_cost) return partition_layers(m, M, c->layout.boundaries, NULL, layout, err);
    for (int l = 0; l < m->n_layers; l++) layer_work[l] = step_work(c, layer_cost + (size_t)l * N_OP_COSTS);
    int rc = partition_layers(m, M, c->layout.boundaries, layer_work, layout, err);
    if (!rc) rc = partition_layers(m, M, c->layout.boundaries, NULL, by_params, err);
    if (rc) return rc;
    double measured = largest_stage(layer_work, layout, M), params = largest_stage(layer_work, by_params, M);
    const int same = !memcmp(layout, by_params, (size_t)(M + 1) * sizeof(int));
    const int wins = measured < (1.0 - CUT_MARGIN) * params;
    if (!same && !wins) memcpy(layout, by_params, (size_t)(M + 1) * sizeof(int));
    if (by_work) *by_work = same || wins;  // where both agree, it is the measured work's cut too
    if (why && !same)
        snprintf(why, why_size, "%s: the cut by measured work's largest stage %.2f ms a step, "
                 "the cut by parameters' %.2f, %s %.0f%% less", wins ? "the measured one" :
                 "parameters kept", 1e3 * measured, 1e3 * params, wins ? "over" : "not", 100 * CUT_MARGIN);
    for (int s = 0; s < M && work; s++) {
        work[s] = 0.0;
        for (int l = layout[s]; l < layout[s + 1]; l++) work[s] += layer_work[l];
    }
    return FG_OK;
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
    if (!timed) return layout_cut(c, m, M, NULL, res->layout, NULL, NULL, NULL, 0, err);
    double *cost = calloc((size_t)L * N_OP_COSTS, sizeof(double));
    LayerTiming lt = {c, e, m, cost};
    rc = measure_in_turns(t, time_layers, &lt, err);
    if (!rc) rc = t->allreduce_sum_world(t, cost, L * N_OP_COSTS, err);
    for (int i = 0; i < L * N_OP_COSTS; i++) cost[i] /= world;
    int by_work = 0;
    if (!rc) rc = layout_cut(c, m, M, cost, res->layout, res->per_stage.work, &by_work,
                             res->layout_why, sizeof res->layout_why, err);
    res->layout_by = by_work ? "measured work" : "parameters";
    free(cost);
    return rc;
}

int layout_table_rows(const Config *c, const TrainEnv *e, Model *m, const int *layout, FgError *err) {
    const LayerStreams *ls = e->streams;
    if (!ls || !ls->open || c->layout.mem_budget <= 0) return FG_OK;  // the run refuses, or nothing streams
    int spill = ls->open_spill && !e->be->on_device;
    return table_rows_choose(e->be, c, m, layout, e->tr, mem_runtime_bytes(c), spill, err);
}
