#include "run_plan.h"

RunPlan run_plan(const Config *c, int replicas) {
    RunPlan r = {.grad_delay = c->grad_delay, .estimator = EST_FG, .shrink = 1.0f};
    r.all_microbatches = replicas * c->micro_batches;
    r.tangents = c->mode == MODE_BP ? 0 : c->tangents;
    if (!r.tangents) return r;
    const PerturbationOps *perturb = perturbation_of_kind((Perturbation)c->perturb);
    r.keeps_inputs = perturb->kept_floats != NULL;
    r.d_per_sample = perturb->d_per_sample;
    r.sends_tangents = c->local_groups == 0;
    r.d_per_microbatch = r.tangents * (r.d_per_sample ? c->micro_batch : 1);
    if (c->mode == MODE_FG_BP) r.estimator = config_estimator(c);
    const EstimatorInfo *e = estimator_info(r.estimator);
    if (e->shrinks) r.shrink = (float)c->shrink;
    r.dots_reference = e->dots_reference;
    r.guided = e->guides;
    if (c->mode == MODE_FG_BP && c->select >= 0 && c->lag == 0) r.exact_in_step = c->select;
    return r;
}
