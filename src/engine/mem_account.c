// Counting a stage's memory by owner, and the model of its activation sizes.
#include "mem_account.h"

#include <math.h>

#include "perturbation.h"
#include "run_plan.h"

const char *const mem_owner_keys[N_MEM_OWNERS] = {
    "stash", "kept_adjoints", "kept_inputs", "loss_adjoints", "lanes", "messages",
    "weights", "gradients", "optimizer", "tied_copies", "io_slots", "data", "runtime"};

void mem_account_add(MemAccount *a, MemOwner owner, double bytes) {
    a->current[owner] += bytes;
    if (a->current[owner] > a->peak[owner]) a->peak[owner] = a->current[owner];
    if (owner >= N_MEM_ACTIVATIONS) return;
    a->activations += bytes;
    if (a->activations > a->activation_peak) a->activation_peak = a->activations;
}

static StashSizes layer_inputs_sizes(const Stage *st, int B, int is_last) {
    (void)is_last;
    return (StashSizes){.stash = stage_stash_floats(st, B), .adjoints = stage_adjoint_floats(st, B)};
}

static StashSizes stage_input_sizes(const Stage *st, int B, int is_last) {
    const size_t input = stage_act_floats(st, st->first, (size_t)B * st->model->layers[st->first].in);
    const size_t output = stage_act_floats(st, st->last, (size_t)B * st->model->layers[st->last - 1].out);
    return (StashSizes){.stash = stage_stash_floats(st, B) - input, .input = input,
                        .adjoints = is_last ? 0 : output};
}

StashSizes stash_sizes(StashKind kind, const Stage *st, int B, int is_last) {
    static StashSizes (*const of_kind[N_STASH_KINDS])(const Stage *, int, int) = {
        [KEEP_LAYER_INPUTS] = layer_inputs_sizes, [KEEP_STAGE_INPUT] = stage_input_sizes};
    return of_kind[kind](st, B, is_last);
}

size_t message_slot_bytes(const Stage *st, int K, int rows) {
    const Model *m = st->model;
    return FG_MAX(stage_message_bytes(st, 1, (size_t)rows * m->max_width, K),
                  (size_t)rows * m->in_features * sizeof(float));
}

// The sizes as pipeline_setup.c allocates them: a lane holds ping-pong activations, tangents
// (K) and adjoints (not fg) of B rows at the model's widest layer, and stage 0's inputs; a
// message slot holds the widest activations with their tangents, or a stage's inputs.
ActivationSizes activation_sizes(const Config *c, const Stage *st, int is_first, int is_last) {
    const Model *m = st->model;
    const RunPlan run = run_plan(c, 1);
    const int B = c->training.micro_batch, N = c->training.micro_batches, K = run.tangents;
    const double f = sizeof(float), width = (double)B * m->max_width, x = (double)B * m->in_features;
    const int grad = run.backprops;
    const StashSizes kept = stash_sizes(run.stash, st, B, is_last);
    ActivationSizes z = {.stash = f * (double)(kept.stash + kept.input), .input = f * (double)kept.input,
                         .adjoint = f * (double)kept.adjoints, .rings = config_timetable_lag(c) + 1};
    if (run.saves_inputs) {
        z.saved = f * (double)stage_saved_floats(st, N * B);
        z.saved_work = z.saved > 0.0 ? f * (double)N * B * m->max_width : 0.0;
        z.saved_work += f * (double)stage_saved_widened_floats(st, N * B);
    }
    if (st->local_groups && !st->local_keeps) z.local_lane = f * (double)B * m->max_width;
    if (is_last && run.backprops) {
        z.loss_adjoints = f * (double)N * B * m->tokens * st->plan[m->n_layers - 1].loss_width;
    }
    z.lane = f * (2.0 * (width + width * K + (grad ? width : 0.0)) + (is_first ? x : 0.0));
    z.message = (double)message_slot_bytes(st, K, B);
    return z;
}

double activation_bytes(const ActivationSizes *z, int stashes, int adjoints, int group,
                        int saved_copies, double *out) {
    // recompute: an input per micro-batch in flight, and the rerun of the op running (a
    // resident stage runs one backward op at a time; each frees its rerun at its end)
    double stash = z->input > 0.0 ? stashes * z->input + (stashes ? z->stash - z->input : 0.0)
                                  : stashes * z->stash;
    double v[N_MEM_ACTIVATIONS] = {
        [MEM_STASH] = stash, [MEM_BW_ADJOINTS] = adjoints * z->adjoint,
        [MEM_SAVED_INPUTS] = saved_copies * z->saved + (saved_copies ? z->saved_work : 0.0) +
                            (group + 1) * z->local_lane,
        [MEM_LOSS_ADJOINTS] = z->rings * z->loss_adjoints,
        [MEM_LANES] = group * z->lane,
        // one inbox slot more than a group takes, and the outbox
        [MEM_MESSAGES] = (group + 2) * z->message};
    double sum = 0.0;
    for (int i = 0; i < N_MEM_ACTIVATIONS; i++) {
        if (out) out[i] = v[i];
        sum += v[i];
    }
    return sum;
}

double mem_runtime_bytes(const Config *c) {
    if (c->layout.mem_runtime >= 0) return c->layout.mem_runtime;
    const double mib = 1048576.0;
    return ceil(fg_resident_bytes() / mib) * mib + RUNTIME_GROWTH;
}

double mem_runtime_margin(const Config *c) { return c->layout.mem_runtime >= 0 ? 0.0 : RUNTIME_MARGIN; }

void mem_resident_bytes(const Config *c, const Model *m, int first, int last, double *out) {
    const LayerNeeds need = layer_needs(c);
    const double f = sizeof(float), n = (double)model_range_count(m, first, last);
    const int tied = m->tied_last >= first && m->tied_last < last;
    const double n_tied = tied ? (double)m->layers[m->tied_last].param_count : 0.0;
    const double per_param[3] = {1 + need.prev, need.grad + need.ref + run_plan(c, 1).forms_estimate,
                                 need.opt_buffers};
    const MemOwner owner[3] = {MEM_WEIGHTS, MEM_GRADIENTS, MEM_OPTIMIZER};
    for (int i = 0; i < 3; i++) {
        out[owner[i]] += f * (n - n_tied) * per_param[i];
        out[MEM_TIED] += f * n_tied * per_param[i];
    }
    for (int l = first; need.weights16 && l < last; l++)  // the GEMMs' BF16 copy of their weights
        if (layer_has_weights16(&m->layers[l]))
            out[l == m->tied_last ? MEM_TIED : MEM_WEIGHTS] += 2.0 * (double)m->layers[l].param_count;
}
