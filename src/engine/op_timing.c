// The start-up's op costs, timed through the engine's own step: a throwaway pipeline of the
// stage (its own weights, as the run initialises them) runs a few steps of the run's timetable
// with a transport that makes its neighbours up (transport_timing), and each kind of op costs
// what the step measured for it. The timetable is then planned with the step's own times, not
// with a second driver's.
#include "op_timing.h"

#include "pipeline.h"
#include "pipeline_internal.h"
#include "transport_staged.h"

// Steps run after the lag (the steps before the first lagged B op runs): each kind's first op
// is its warm-up (allocations, cold caches) and is not counted.
enum { TIMED_STEPS = 2 };

// The run as its stage is timed: resident (the streamed source's costs are nominal), no
// calibration, and fg+bp with an explicit select, so that its timetable has B ops to time on
// every stage whatever the builder would fit into the nominal bubbles (at least one micro-batch
// left out of c, so that U has derivatives to weigh).
static Config timing_config(const Config *c) {
    Config t = *c;
    t.layout.mem_budget = 0, t.layout.stream = 0;
    t.timetable.calibrate_steps = 0;
    const RunPlan run = run_plan(c, 1);
    if (run.fills_bubbles && run.select < 0)
        t.timetable.select = 1, t.timetable.lag = t.training.micro_batches > 1 ? 0 : 1;
    return t;
}

// One sample of zeros (label 0 at every token): values do not change the cost.
static Dataset timing_data(const Model *m) {
    return (Dataset){.count = 1, .features = m->in_features, .classes = 1, .tokens = m->tokens,
                     .x = fg_alloc_floats((size_t)m->in_features),
                     .labels = fg_alloc_bytes((size_t)m->tokens * sizeof(Label))};
}

// Every op of `step` that ran, its seconds into by_kind[kind] (n[kind] of them so far).
static void collect(const Pipeline *p, long step, double *by_kind[OP_U + 1], int n[OP_U + 1]) {
    const ExecPlan *plan = p->tt.plan;
    for (int i = 0; i < plan->n_ops; i++) {
        const int idx = plan->op[i];
        const ScheduledOp *op = &p->tt.sched.ops[idx];
        if (op_runs(op, step, p->first_step))
            by_kind[op->kind][n[op->kind]++] = p->tt.measured[2 * idx + 1] - p->tt.measured[2 * idx];
    }
}

// The median of a kind's ops but its first (the warm-up), or the first where it ran once.
static double typical(double *seconds, int n) {
    return n > 1 ? fg_median(seconds + 1, (size_t)n - 1) : n ? seconds[0] : -1.0;
}

// Steps the timing pipeline and turns the median of each kind's ops into costs.
static int time_steps(Pipeline *t, double cost[N_OP_COSTS], FgError *err) {
    const long steps = config_timetable_lag(t->cfg) + TIMED_STEPS;
    const int per_step = FG_MAX(t->tt.sched.n_ops, 1);
    size_t *order = fg_alloc_bytes(sizeof(size_t) * (size_t)t->cfg->training.micro_batches *
                                   (size_t)t->cfg->training.micro_batch);  // sample 0 each time
    double *by_kind[OP_U + 1], seconds[OP_U + 1];
    int n[OP_U + 1] = {0}, rc = FG_OK;
    for (int k = 0; k <= OP_U; k++) by_kind[k] = fg_alloc_bytes(sizeof(double) * (size_t)per_step * (size_t)steps);
    for (long step = 0; step < steps && !rc; step++) {
        StepResult res;
        rc = pipeline_step(t, step, t->cfg->training.steps, order, 0, &res, err);
        if (!rc) collect(t, step, by_kind, n);
    }
    for (int k = 0; k <= OP_U; k++) seconds[k] = typical(by_kind[k], n[k]);
    if (!rc) pipeline_costs_of_kinds(t, seconds, cost);
    // What never ran costs nothing (not the even nominal costs it was planned with).
    const int ran_b = n[OP_B] > 0;
    if (!ran_b && !n[OP_BI]) cost[COST_BI] = 0.0;
    if (!ran_b && !n[OP_BW]) cost[COST_BW] = 0.0;
    if (!n[OP_U]) cost[COST_U] = 0.0;
    for (int k = 0; k <= OP_U; k++) fg_free(by_kind[k]);
    fg_free(order);
    return rc;
}

int pipeline_time_ops(const Backend *be, const Config *c, const Model *m, const int *first,
                      int stage, int stages, int replica, int replicas, double cost[N_OP_COSTS],
                      FgError *err) {
    const Config tc = timing_config(c);
    Dataset ds = timing_data(m);
    Transport host = transport_timing(stage, stages, replica, replicas);
    Transport staged = be->on_device ? transport_staged(host, be) : host;
    // Planned with even nominal costs: which ops the timing's timetable holds does not depend
    // on what they cost (timing_config).
    double nominal[N_OP_COSTS * SCHED_MAX_STAGES];
    for (int k = 0; k < N_OP_COSTS; k++)
        for (int s = 0; s < stages; s++) nominal[k * stages + s] = k < COST_U ? 1.0 : 0.0;
    Pipeline t = {0};
    OpCostSource given = {.given = nominal};
    int rc = pipeline_init(&t, be, &tc, m, first, &staged, &ds, NULL, 0, given, err);
    if (!rc) rc = time_steps(&t, cost, err);
    FgError close_err;
    if (pipeline_free(&t, rc ? &close_err : err) && !rc) rc = err->code ? err->code : FG_ERR_INPUT;
    if (be->on_device) transport_staged_free(&staged);
    fg_free(ds.x);
    fg_free(ds.labels);
    return rc;
}
