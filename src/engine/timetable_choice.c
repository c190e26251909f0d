// Which timetable a run gets. Every mode but one has a single timetable for its costs. fg+bp
// with select = -1 whose update is c alone (mix at shrink 0, op F without tangents) has a
// choice: an unselected micro-batch's F trains nothing there, so filling only fg's bubbles
// (the auto builder, fg's step) is one point of a continuum that ends with every micro-batch
// backpropagated at some lag (a longer step, no wasted F). The run takes the candidate with
// the most progress per second, modelled as exact micro-batches per second, each weighed
// 1 / (1 + lag_cost x the lag of its stage's ops): in the small-batch regime (the batch well
// below the gradient-noise scale, as on the main job) a step's progress grows with the samples
// in its gradient, and a stale gradient buys less (lag_cost, measured). A stage without a
// correction never learns: such a timetable is no candidate. Every micro-batch at lag 0 is
// bp's gradient, so bp-zb's timetable (the shortest bp one) is a candidate too: run in fg+bp
// mode it gives bp-zb's weights bit for bit (c is scaled as bp scales its gradient).
#include <stdarg.h>
#include <stdio.h>

#include "run_plan.h"
#include "timetable_choice.h"

ScheduleSpec pipeline_schedule_spec(const Config *c, int M, const double *costs) {
    const RunPlan run = run_plan(c, 1);
    return (ScheduleSpec){M, c->training.micro_batches, run.schedule, config_timetable_lag(c),
                          run.select, costs + COST_F * M, costs + COST_BI * M, costs + COST_BW * M,
                          costs + COST_U * M, run.recompute};
}

double pipeline_weighed_exact_rate(const Schedule *S, double lag_cost) {
    double sum = 0.0;
    for (int s = 0; s < S->M; s++) {
        StageBubbles b = schedule_stage_bubbles(S, s);
        if (!b.corrections) return 0.0;
        sum += b.corrections / (1.0 + lag_cost * b.max_lag);
    }
    return sum / S->M / (S->n_phases * S->makespan);
}

// Appends to a why-line of `size` bytes (NULL: none), which holds *len characters.
static void append(char *why, size_t size, size_t *len, const char *fmt, ...) {
    if (!why || *len >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(why + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

int pipeline_build_timetable(const Config *c, int M, const double *costs, int without_b,
                             Schedule *out, char *why, size_t why_size, FgError *err) {
    ScheduleSpec spec = pipeline_schedule_spec(c, M, costs);
    if (without_b) spec.lag = spec.select = 0;
    size_t len = 0;
    if (why && why_size) why[0] = '\0';
    int rc = schedule_build_clearing(&spec, costs + COST_ZERO * M, out, err);
    if (rc || without_b || !run_plan(c, 1).chooses_timetable) return rc;
    const double lag_cost = c->timetable.lag_cost;
    double best = pipeline_weighed_exact_rate(out, lag_cost);
    append(why, why_size, &len, "c alone: exact micro-batches per second (weighed by lag): auto %.0f", best);
    // Every micro-batch at lag 0 is bp: bp-zb's interleaved timetable first (ties go to it),
    // then fg+bp's explicit timetable, as select = N, at each lag the run allows.
    int won = -2;  // the candidate taken: -2 auto, -1 bp-zb's, else all at that lag
    for (int lag = -1; lag <= c->timetable.max_lag && !rc; lag++) {
        ScheduleSpec all = spec;
        all.select = spec.N, all.lag = lag;
        if (lag < 0) all.mode = SCHED_BP_ZB, all.select = -1, all.lag = 0;
        Schedule S;
        if ((rc = schedule_build_clearing(&all, costs + COST_ZERO * M, &S, err))) break;
        double rate = pipeline_weighed_exact_rate(&S, lag_cost);
        if (lag < 0) append(why, why_size, &len, ", bp-zb's timetable %.0f", rate);
        else append(why, why_size, &len, ", all %d at lag %d %.0f", spec.N, lag, rate);
        if (rate > best) {
            schedule_free(out);
            *out = S, best = rate, won = lag;
        } else {
            schedule_free(&S);
        }
    }
    if (rc) {
        schedule_free(out);
        return rc;
    }
    if (won == -1) append(why, why_size, &len, ": bp-zb's timetable");
    else if (won == -2) append(why, why_size, &len, ": auto");
    else append(why, why_size, &len, ": all at lag %d", out->lag);
    return FG_OK;
}
