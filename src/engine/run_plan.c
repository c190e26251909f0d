#include "run_plan.h"

RunPlan run_plan(const Config *c, int replicas) {
    RunPlan r = {.grad_delay = c->timetable.grad_delay, .estimator = EST_FG, .shrink = 1.0f};
    r.all_microbatches = replicas * c->training.micro_batches;
    r.forms_estimate = c->method.mode != MODE_BP;
    r.recompute = c->timetable.recompute == RECOMPUTE_STAGE && c->method.mode != MODE_FG;
    if (c->method.mode == MODE_FG_BP) r.estimator = config_estimator(c);
    const EstimatorInfo *e = estimator_info(r.estimator);
    if (e->shrinks) r.shrink = (float)c->method.shrink;
    // mix at shrink 0 is c alone: F's tangents would be weighed by 0, so F runs without them
    // (the plain forward: no tangents in its messages, no inputs saved for U).
    int fg_weighs_zero = e->base_is_c && r.shrink == 0.0f;
    r.tangents = c->method.mode == MODE_BP || fg_weighs_zero ? 0 : c->method.tangents;
    const TimetableConfig *tt = &c->timetable;
    if (c->method.mode == MODE_FG_BP && tt->select >= 0 && tt->lag == 0) r.exact_in_step = tt->select;
    if (!r.tangents) return r;
    const PerturbationOps *perturb = perturbation_of_kind((Perturbation)c->method.perturb);
    r.saves_inputs = perturb->saved_floats != NULL;
    r.d_per_sample = perturb->d_per_sample;
    r.sends_tangents = c->method.local_groups == 0;
    r.d_per_microbatch = r.tangents * (r.d_per_sample ? c->training.micro_batch : 1);
    r.dots_reference = e->dots_reference;
    r.guided = e->guides;
    return r;
}
