#include "run_plan.h"

#include "backend.h"

// Micro-batches a stage keeps stashes for at once, before the timetable says: all in bp, the
// selected ones of lag + 1 steps in fg+bp, and in auto about a chain per stage per step.
static int stashes_in_flight(const Config *c) {
    if (c->method.mode == MODE_BP) return c->training.micro_batches;
    if (c->method.mode == MODE_FG) return 0;
    if (c->timetable.select >= 0) return c->timetable.select * (1 + c->timetable.lag);
    return FG_MIN(c->training.micro_batches, c->layout.stages) * (1 + c->timetable.max_lag);
}

// Micro-batches whose input adjoints Bi keeps for Bw at once: a split backward (bp-zb, fg+bp)
// keeps one per stash; GPipe and 1F1B run B whole.
static int adjoints_in_flight(const Config *c) {
    if (c->method.mode == MODE_BP) return c->timetable.schedule == SCHEDULE_ZB ? c->training.micro_batches : 0;
    return stashes_in_flight(c);
}

static ScheduleMode schedule_mode(const Config *c) {
    static const ScheduleMode bp[] = {[SCHEDULE_GPIPE] = SCHED_BP_GPIPE,
                                      [SCHEDULE_1F1B] = SCHED_BP_1F1B, [SCHEDULE_ZB] = SCHED_BP_ZB};
    if (c->method.mode == MODE_BP) return bp[c->timetable.schedule];
    return c->method.mode == MODE_FG ? SCHED_FG : SCHED_FG_BP;
}

// The mode's capabilities (RunPlan's second part).
static void plan_mode(const Config *c, RunPlan *r) {
    r->backprops = c->method.mode != MODE_FG;
    r->corrects = c->method.mode == MODE_FG_BP;
    r->clips_gradient = c->method.mode == MODE_BP && c->optim.clip_norm > 0;
    r->keeps_gradient = r->corrects || r->clips_gradient;
    r->schedule = schedule_mode(c);
    r->select = r->corrects ? c->timetable.select : -1;
    r->fills_bubbles = r->corrects;
    r->stashes_in_flight = stashes_in_flight(c);
    r->adjoints_in_flight = adjoints_in_flight(c);
}

LayerNeeds layer_needs(const Config *c) {
    const RunPlan run = run_plan(c, 1);
    return (LayerNeeds){
        .opt_buffers = optimizer_state_buffers(c->optim.optimizer),
        .ref = config_dots_reference(c),  // cv, guided: the step before's c, dotted in F
        .grad = run.backprops,
        // fg+bp's c becomes the next step's reference (and with select's lag 0 is part of the
        // update); bp's gradient is read after the B wave only when a global norm (clipping)
        // must come first.
        .keep_grad = run.keeps_gradient,
        .prev = config_timetable_lag(c),
        .weights16 = c->layout.precision == PRECISION_BF16,
    };
}

RunPlan run_plan(const Config *c, int replicas) {
    RunPlan r = {.grad_delay = c->timetable.grad_delay, .estimator = EST_FG, .shrink = 1.0f};
    plan_mode(c, &r);
    r.all_microbatches = replicas * c->training.micro_batches;
    r.forms_estimate = c->method.mode != MODE_BP;
    r.recompute = c->timetable.recompute == RECOMPUTE_STAGE && c->method.mode != MODE_FG;
    r.stash = r.recompute ? KEEP_STAGE_INPUT : KEEP_LAYER_INPUTS;
    if (c->method.mode == MODE_FG_BP) r.estimator = config_estimator(c);
    const EstimatorInfo *e = estimator_info(r.estimator);
    if (e->shrinks) r.shrink = (float)c->method.shrink;
    // mix at shrink 0 is c alone: F's tangents would be weighed by 0, so F runs without them
    // (the plain forward: no tangents in its messages, no inputs saved for U).
    int fg_weighs_zero = e->base_is_c && r.shrink == 0.0f;
    r.tangents = c->method.mode == MODE_BP || fg_weighs_zero ? 0 : c->method.tangents;
    const TimetableConfig *tt = &c->timetable;
    if (c->method.mode == MODE_FG_BP && tt->select >= 0 && tt->lag == 0) r.exact_in_step = tt->select;
    r.chooses_timetable = r.corrects && tt->select < 0 && !r.tangents;
    r.activations = c->layout.precision == PRECISION_BF16 ? FG_BF16 : FG_F32;
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
