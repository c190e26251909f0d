// Which timetable a run gets. Every mode but one has a single timetable for its costs. fg+bp
// with select = -1 whose update is c alone (mix at shrink 0, op F without tangents) has a
// choice: an unselected micro-batch's F trains nothing there, so filling only fg's bubbles
// (the auto builder, fg's step) is one point of a continuum that ends with every micro-batch
// backpropagated at some lag (a longer step, no wasted F). The run takes the candidate with
// the most progress per second, modelled as exact micro-batches per second, each weighed
// 1 / (1 + lag_cost x the lag of its stage's ops): in the small-batch regime (the batch well
// below the gradient-noise scale, as on the main job) a step's progress grows with the samples
// in its gradient, and a stale gradient buys less (lag_cost, measured). A stage without a
// correction never learns: such a timetable is no candidate.
#include <stdio.h>

#include "pipeline_internal.h"

static ScheduleMode schedule_mode(const Config *c) {
    static const ScheduleMode bp[] = {[SCHEDULE_GPIPE] = SCHED_BP_GPIPE,
                                      [SCHEDULE_1F1B] = SCHED_BP_1F1B, [SCHEDULE_ZB] = SCHED_BP_ZB};
    if (c->method.mode == MODE_BP) return bp[c->timetable.schedule];
    return c->method.mode == MODE_FG ? SCHED_FG : SCHED_FG_BP;
}

ScheduleSpec pipeline_schedule_spec(const Config *c, int M, const double *costs) {
    const int select = c->method.mode == MODE_FG_BP ? c->timetable.select : -1;
    return (ScheduleSpec){M, c->training.micro_batches, schedule_mode(c), config_timetable_lag(c),
                          select, costs + COST_F * M, costs + COST_BI * M, costs + COST_BW * M,
                          costs + COST_U * M};
}

// Exact micro-batches per second of timetable S, weighed by their lag; 0 if a stage has none.
static double weighed_exact_rate(const Schedule *S, double lag_cost) {
    double sum = 0.0;
    for (int s = 0; s < S->M; s++) {
        StageBubbles b = schedule_stage_bubbles(S, s);
        if (!b.corrections) return 0.0;
        sum += b.corrections / (1.0 + lag_cost * b.max_lag);
    }
    return sum / S->M / (S->n_phases * S->makespan);
}

static int weighs_c_alone(const Config *c) {
    return c->method.mode == MODE_FG_BP && c->timetable.select < 0 && !run_plan(c, 1).tangents;
}

int pipeline_build_timetable(const Config *c, int M, const double *costs, int without_b,
                             Schedule *out, char *why, size_t why_size, FgError *err) {
    ScheduleSpec spec = pipeline_schedule_spec(c, M, costs);
    if (without_b) spec.lag = spec.select = 0;
    if (why && why_size) why[0] = '\0';
    int rc = schedule_build_clearing(&spec, costs + COST_ZERO * M, out, err);
    if (rc || without_b || !weighs_c_alone(c)) return rc;
    const double lag_cost = c->timetable.lag_cost;
    double best = weighed_exact_rate(out, lag_cost);
    int n = why ? snprintf(why, why_size, "c alone: exact micro-batches per second (weighed by "
                           "lag): auto %.0f", best) : 0;
    // Every micro-batch at each lag the run allows: the explicit timetable, as select = N.
    for (int lag = 0; lag <= c->timetable.max_lag && !rc; lag++) {
        ScheduleSpec all = spec;
        all.select = spec.N, all.lag = lag;
        Schedule S;
        if ((rc = schedule_build_clearing(&all, costs + COST_ZERO * M, &S, err))) break;
        double rate = weighed_exact_rate(&S, lag_cost);
        if (why && n >= 0 && (size_t)n < why_size)
            n += snprintf(why + n, why_size - (size_t)n, ", all %d at lag %d %.0f", spec.N, lag, rate);
        if (rate > best) {
            schedule_free(out);
            *out = S, best = rate;
        } else {
            schedule_free(&S);
        }
    }
    if (rc) schedule_free(out);
    if (!rc && why && n >= 0 && (size_t)n < why_size && out->select < 0)
        snprintf(why + n, why_size - (size_t)n, ": auto");
    else if (!rc && why && n >= 0 && (size_t)n < why_size)
        snprintf(why + n, why_size - (size_t)n, ": all at lag %d", out->lag);
    return rc;
}
