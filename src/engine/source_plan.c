// Where a stage's layers live (source_plan.h).
#include "source_plan.h"

#include <stdlib.h>

#include "engine_ops.h"
#include "pipeline.h"
#include "timetable_choice.h"

// The fused head's scratch on the last stage (head_loss_work_floats): a block of logits and
// their tangents, and activity's estimate of the head over the replica's micro-batches.
static double head_bytes(const Pipeline *p) {
    const Layer *L = &p->model->layers[p->stage.last - 1];
    if (!p->stage.plan[p->stage.last - 1].scores) return 0.0;
    int n_mb = p->run.saves_inputs ? p->cfg->training.micro_batches : 0, B = p->cfg->training.micro_batch;
    return (double)head_loss_work_floats(L, B, p->K, n_mb) * sizeof(float) +
           (double)p->cfg->training.micro_batches * stage_rows_state_bytes(&p->stage, p->stage.last - 1, B);
}

// A resident stage that cannot fit this machine is refused before it allocates: an allocation
// that fails aborts, after a long time on a machine that overcommits.
static int check_fits_machine(const Pipeline *p, double in_memory, FgError *err) {
    double available = fg_available_memory_bytes();
    if (p->cfg->layout.device != DEVICE_CPU || available <= 0 || in_memory <= available) return FG_OK;
    return fg_fail(err, FG_ERR_INPUT, "stage %d needs %.2f GiB (weights, optimizer state, "
                   "activations), this machine has %.2f GiB available: use more stages, or "
                   "mem_budget and weights_dir to stream its layers from flash", p->tr->stage,
                   in_memory / 1073741824.0, available / 1073741824.0);
}

// What the stage needs in memory: its layers' buffers and activations (mem_account.h) with the
// stashes and the adjoints Bi keeps for Bw of the micro-batches in flight, and what F keeps for
// U (activity: every micro-batch's layer inputs; local losses: also their estimates) until the
// update. local_keeps: local losses, F keeps what it would fold (a streamed stage).
static ActivationSizes stage_activations(const Pipeline *p, int local_keeps) {
    Stage st = p->stage;
    st.local_keeps = local_keeps;
    return activation_sizes(p->cfg, &st, p->is_first, p->is_last);
}

// Resident: every layer's buffers, and the activations of one op group at a time.
static double resident_needs_bytes(const Pipeline *p) {
    const ActivationSizes z = stage_activations(p, 0);
    const LayerNeeds need = p->need;
    int buffers = 1 + need.opt_buffers + need.ref + need.grad + need.prev + p->run.forms_estimate;
    const double activations = activation_bytes(&z, p->run.stashes_in_flight, p->run.adjoints_in_flight, 1, 1, NULL);
    return (double)p->n * sizeof(float) * buffers + activations + head_bytes(p);
}

// Streamed, what stays besides the slots: lanes of a whole wave, stashes and adjoints for Bw,
// two steps' saved inputs, a fused head's blocks, one layer's gradient and update, the parameter
// tangents of one layer (K). On a device these are device memory, and so is a copy of the layer
// being computed on; the budget counts host and device bytes alike.
double source_streamed_needs_bytes(const Pipeline *p) {
    const ActivationSizes z = stage_activations(p, 1);
    return activation_bytes(&z, p->run.stashes_in_flight, p->run.adjoints_in_flight,
                            p->cfg->training.micro_batches, 2, NULL) + head_bytes(p) +
           (double)p->largest_trained * sizeof(float) * ((p->need.grad || p->run.forms_estimate) + p->K);
}

void source_nominal_costs(const Config *c, double n, int K, double *cost, int stride) {
    int B = c->training.micro_batch;
    cost[COST_F * stride] = 2.0 * n * B * (1 + K) / 1e10;
    cost[COST_BI * stride] = cost[COST_BW * stride] = 2.0 * n * B / 1e10;
    cost[COST_U * stride] = cost[COST_ZERO * stride] = 0.0;
}

// Layer-major (exec_plan.h: a step's F ops form one group, its backward ops the next): a stash
// lives from its F group to the group of its last use, a B or Bw op `lag` steps later, and an
// adjoint Bi keeps from Bi's group to its Bw's. At the end of step t's F group, a B or Bw op of
// step t + j (j = 0..SCHED_MAX_LAG) with lag >= j holds a stash made by then; in step t's
// backward group, a Bw of step t + j whose Bi ran at least j steps before it holds an adjoint.
void source_streamed_in_flight(Pipeline *p, const Schedule *S, int stage) {
    int most_stashes = 0, most_kept = 0;
    for (int ph = 0; ph < S->n_phases; ph++) {
        int stashes = 0, kept = 0;
        for (int j = 0; j <= SCHED_MAX_LAG; j++) {
            const int at = (ph + j) % S->n_phases;
            const ScheduledOp *ops;
            const int n = schedule_stage_ops(S, at, stage, &ops);
            for (int i = 0; i < n; i++) {
                const ScheduledOp *o = &ops[i];
                if ((o->kind != OP_B && o->kind != OP_BW) || o->lag < j) continue;
                stashes++;
                if (o->kind != OP_BW) continue;
                const ScheduledOp *bi = S->mode == SCHED_FG_BP
                    ? schedule_chain_op(S, OP_BI, schedule_source_phase(S, at, o->lag), o->microbatch, stage) : o;
                if (bi && o->lag - bi->lag >= j) kept++;
            }
        }
        most_stashes = FG_MAX(most_stashes, stashes), most_kept = FG_MAX(most_kept, kept);
    }
    p->run.stashes_in_flight = most_stashes;
    p->run.adjoints_in_flight = most_kept;
}

// The timetable of a pipeline whose stages all stream (nominal costs): what `fgpipe plan` and
// the choice of row blocks assume a streamed stage holds; the run builds its own from the costs
// it has (a resident neighbour's are timed) and checks its budget with that.
static int nominal_in_flight(Pipeline *p, const int *first, int stage, int stages, FgError *err) {
    double *costs = calloc((size_t)N_OP_COSTS * stages, sizeof(double));
    for (int s = 0; s < stages; s++)
        source_nominal_costs(p->cfg, (double)model_range_count(p->model, first[s], first[s + 1]), p->K,
                             costs + s, stages);
    Schedule S;
    int rc = pipeline_build_timetable(p->cfg, stages, costs, 0, &S, NULL, 0, err);
    if (!rc) source_streamed_in_flight(p, &S, stage), schedule_free(&S);
    free(costs);
    return rc;
}

int pipeline_stage_needs(const Backend *be, const Config *c, const Model *m, const int *first, int stage,
                         int stages, int replicas, double *in_memory, double *streamed, FgError *err) {
    Pipeline *p = calloc(1, sizeof *p);
    p->be = be, p->cfg = c, p->model = m, p->is_first = stage == 0, p->is_last = stage == stages - 1;
    p->run = run_plan(c, replicas);
    p->K = p->run.tangents;
    p->need = layer_needs(c);
    p->largest = model_largest_block(m, first[stage], first[stage + 1]);
    p->largest_trained = model_largest_trained_block(m, first[stage], first[stage + 1]);
    // The stage's shape without its buffers (pdot: K tangents of its largest block).
    int rc = stage_init(&p->stage, be, m, first[stage], first[stage + 1], c->training.micro_batch, 0, err);
    if (!rc) {
        p->n = p->stage.param_count;
        p->stage.tangents = p->K, p->stage.perturb = (Perturbation)c->method.perturb;
        if (p->K) p->stage.local_groups = c->method.local_groups;
        *in_memory = resident_needs_bytes(p);
        if (!(rc = nominal_in_flight(p, first, stage, stages, err))) *streamed = source_streamed_needs_bytes(p);
        p->stage.tangents = p->stage.local_groups = 0;
        stage_free(&p->stage);
    }
    free(p);
    return rc;
}

// Resident when everything fits mem_budget with the runtime (or there is none) and stream is
// 0, else streamed from weights_dir: decided (*streams_here) before anything is allocated, so
// that the start-up's timing of the ops, which makes buffers of the stage's size, does not add
// to the stage's own.
int source_choose(Pipeline *p, const LayerStreams *streams, int *streams_here, FgError *err) {
    const Config *c = p->cfg;
    double in_memory = resident_needs_bytes(p);
    // Every stage of the pipeline learns how many stream before any store is opened: resuming
    // from the stores needs all of them (and their versions are agreed over the whole grid).
    int rc;
    *streams_here = c->layout.mem_budget > 0 &&
                    (c->layout.stream || in_memory + p->runtime > c->layout.mem_budget);
    double n_streamed = *streams_here;
    if ((rc = p->tr->allreduce_sum(p->tr, &n_streamed, 1, err))) return rc;
    p->n_streamed = (int)n_streamed;
    p->layer_major = p->n_streamed > 0;
    if (streams && streams->resume && p->n_streamed < p->tr->stages)
        return fg_fail(err, FG_ERR_INPUT, "--resume-weights: %d of the %d stages fit mem_budget and "
                       "have no layer store to resume from (resume them from a checkpoint)",
                       p->tr->stages - p->n_streamed, p->tr->stages);
    if (!*streams_here) return check_fits_machine(p, in_memory, err);
    if (p->run.grad_delay)
        return fg_fail(err, FG_ERR_INPUT, "stage %d streams its layers (mem_budget): grad_delay "
                       "needs every stage in memory", p->tr->stage);
    if (!streams || !streams->open)
        return fg_fail(err, FG_ERR_INPUT, "stage %d needs %.0f bytes with the runtime's %.0f, more "
                       "than mem_budget (%.0f), and this build cannot stream layers from local flash",
                       p->tr->stage, in_memory + p->runtime, p->runtime, c->layout.mem_budget);
    return FG_OK;
}

int source_wrap_blocks(const Pipeline *p) {
    const int l = layers_first_param(p);
    if (!p->is_first || !p->src.streamed || !p->data || !p->data->text || l < 0) return 0;
    const int blocks = layer_blocks(&p->model->layers[l]);
    return blocks > 1 && !p->stage.plan[l].trains ? blocks : 0;
}
