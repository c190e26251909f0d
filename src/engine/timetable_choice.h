// Which timetable a run gets for its op costs (timetable_choice.c explains the choice).
#ifndef FGPIPE_TIMETABLE_CHOICE_H
#define FGPIPE_TIMETABLE_CHOICE_H

#include "config.h"
#include "op_cost.h"
#include "schedule.h"

// The timetable spec of cfg on M stages with op costs costs[kind * M + stage] (pointers into
// costs): schedule_build_clearing(&spec, costs + COST_ZERO * M, ...) is the run's timetable.
ScheduleSpec pipeline_schedule_spec(const Config *cfg, int M, const double *costs);
// The run's timetable for costs (op_cost.h's [kind * M + stage]) into out: the one of its spec
// (without_b: fg+bp's without B ops), or, for fg+bp with select = -1 and c alone, the candidate
// with the most exact micro-batches per second weighed by lag (timetable_choice.c), with the
// figures behind the choice in why ("" where there was none; why may be NULL).
int pipeline_build_timetable(const Config *cfg, int M, const double *costs, int without_b,
                             Schedule *out, char *why, size_t why_size, FgError *err);
// What that choice maximises: mean over stages of (corrections per step / (1 + lag_cost x the
// stage's largest lag)) per second of step; 0 when a stage has no correction.
double pipeline_weighed_exact_rate(const Schedule *S, double lag_cost);

#endif
