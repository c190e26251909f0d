#include "run_plan.h"

RunPlan run_plan(const Config *c, int replicas) {
    RunPlan r = {.mode = (Mode)c->mode, .microbatches = c->micro_batches, .grad_delay = c->grad_delay};
    r.all_microbatches = replicas * c->micro_batches;
    r.tangents = c->mode == MODE_BP ? 0 : c->tangents;
    if (!r.tangents) return r;
    r.activity = c->perturb == PERTURB_ACTIVITY;
    r.sends_tangents = c->local_groups == 0;
    r.d_per_microbatch = r.tangents * (r.activity ? c->micro_batch : 1);
    r.estimator = c->mode == MODE_FG_BP ? config_estimator(c) : EST_FG;
    r.shrink = r.estimator == EST_CV || r.estimator == EST_MIX ? (float)c->shrink : 1.0f;
    r.dots_reference = r.estimator == EST_CV || r.estimator == EST_GUIDED;
    r.guided = r.estimator == EST_GUIDED;
    if (c->mode == MODE_FG_BP && c->select >= 0 && c->lag == 0) r.exact_in_step = c->select;
    return r;
}
