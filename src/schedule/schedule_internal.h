// What the parts of the schedule builder share: schedule.c (spec, FG and bp timetables,
// statistics), schedule_fill.c (fg+bp's adjoint chains), schedule_check.c (invariants) and
// schedule_trace.c (Chrome trace).
#ifndef FGPIPE_SCHEDULE_INTERNAL_H
#define FGPIPE_SCHEDULE_INTERNAL_H

#include "schedule.h"

// While building, phase p / stage s owns a segment of `cap` ops at ops + (p*M + s) * cap;
// schedule_pack moves the segments together.
typedef struct {
    Schedule *S;
    int cap;
} Build;

int schedule_validate(const ScheduleSpec *sp, FgError *err);
int schedule_is_bp(ScheduleMode mode);
// The planned seconds of a Bw op of stage s (ScheduleSpec.bw_redoes_bi).
double timetable_cost_bw(const ScheduleSpec *sp, int s);

// End times of F(s,b) in the pure-FG timetable, end_f[s*N+b]: each F as soon as it can.
void timetable_fg_ends(const ScheduleSpec *sp, double *end_f);
// The same, each F as late as it can without moving the last F: a stage faster than the one
// before gathers its idle time before its first F instead of in gaps between its F ops, too
// short for a B op.
void timetable_fg_latest_ends(const ScheduleSpec *sp, double *end_f);
double timetable_fg_start(const double *end_f, int N, int s, int b);

// Allocates the building segments (n_phases, capacity) and places every phase's F ops to end
// at end_f (one of the two above); sets fg_makespan and last_f.
void timetable_build_start(Build *b, const ScheduleSpec *sp, int n_phases, int cap, const double *end_f,
                           Schedule *S);
ScheduledOp *timetable_segment(const Build *b, int phase, int s);
int *timetable_segment_count(const Build *b, int phase, int s);
void timetable_segment_insert(const Build *b, int phase, int s, int pos, ScheduledOp op);
void timetable_segment_remove(const Build *b, int phase, int s, const ScheduledOp *op);
// Earliest start >= ready of an idle gap of length c in a sorted segment that ends by
// `limit`; *pos gets the index to insert at. Returns -1 if none.
double timetable_earliest_gap(const ScheduledOp *ops, int n, double ready, double c, double limit, int *pos);
// Appends U to every stage of every phase, starting when the last F or B op of the phase ends.
void timetable_build_updates(Build *b, const ScheduleSpec *sp);
// Packs the segments together and sets the makespan.
void schedule_pack(Build *b);

// B time before the last F, and FG's idle time before the last F, of stage s over the phases.
void timetable_stage_fill(const Schedule *S, int s, double *used, double *idle);

// fg+bp: the adjoint chains (schedule_fill.c).
int schedule_fill_chains(const ScheduleSpec *sp, Schedule *out, FgError *err);

double schedule_planned_cost(const ScheduleSpec *sp, const ScheduledOp *o);
const char *schedule_op_name(const ScheduledOp *o, char *buf, size_t n);

#endif
