// What pipeline.c (the step driver) defines for pipeline_setup.c above it: the calibration's
// forward-only steps, and the reference's state after a load.
#ifndef FGPIPE_PIPELINE_INTERNAL_H
#define FGPIPE_PIPELINE_INTERNAL_H

#include "engine_state.h"

// Calibration: `steps` steps of the timetable's F ops alone (no B, no update), every stage at
// once, on the first samples of the data; *f_seconds: this stage's F, the median over the
// steps after the first (a warm-up) of each step's median.
int pipeline_time_forward(Pipeline *p, int steps, double *f_seconds, FgError *err);

// ref_active from the reference's values (after a load): one sum over the stages.
int pipeline_refresh_ref(Pipeline *p, FgError *err);

#endif
