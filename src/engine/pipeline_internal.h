// What pipeline.c (the step driver) defines for pipeline_setup.c above it: the calibration's
// forward-only steps, the reference's state after a load, and evaluation's chunks.
#ifndef FGPIPE_PIPELINE_INTERNAL_H
#define FGPIPE_PIPELINE_INTERNAL_H

#include "engine_state.h"

// Calibration: `steps` steps of the timetable's F ops alone (no B, no update), every stage at
// once, on the first samples of the data; *f_seconds: this stage's F, the median over the
// steps after the first (a warm-up) of each step's median.
int pipeline_time_forward(Pipeline *p, int steps, double *f_seconds, FgError *err);

// ref_active from the reference's values (after a load): one sum over the stages.
int pipeline_refresh_ref(Pipeline *p, FgError *err);

// Evaluation's chunks: their input (the data, or the stage before's output) and their output
// (sent on, or scored into totals: loss * rows, hits).
int pipeline_eval_input(Pipeline *p, const Dataset *ds, size_t chunk, float *x, FgError *err);
// A fused head scored the chunk in its lane a: its loss and hits.
int pipeline_eval_output(Pipeline *p, const Dataset *ds, size_t chunk, const Lane *a,
                         double *totals, FgError *err);

#endif
