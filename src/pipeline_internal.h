// What pipeline.c shares with pipeline_stream.c (the out-of-core step): message tags, the
// last stage's loss and the estimator's coefficients, written once for both.
#ifndef FGPIPE_PIPELINE_INTERNAL_H
#define FGPIPE_PIPELINE_INTERNAL_H

#include "pipeline.h"

// Tags name the kind, the step's parity and the micro-batch, so a stage can never take one
// micro-batch's data for another's.
enum { TAG_FORWARD = 0, TAG_BACKWARD = 1, TAG_EVAL = 2 };
int tag_of(int kind, long step, int mb);

// Floats of a forward message into `layer`: rows x in activations, then K times as many tangents.
size_t forward_msg_floats(const Pipeline *p, int layer, int rows);

int is_selected(const Pipeline *p, int mb);
int global_microbatch(const Pipeline *p, int mb);
int all_microbatches(const Pipeline *p);

// The last stage's end of op F for micro-batch mb: its loss (added to *loss_sum), its
// directional derivatives d into the step's scalars (fg), and for a selected micro-batch the
// loss adjoint dz, scaled for its average.
void stage_loss(Pipeline *p, long step, int mb, const float *y, const float *ydot,
                const size_t *order, size_t sample0, double *loss_sum);

// Sums per-layer rows of `width` values in layer order: the same bits on any stage layout.
void sum_layer_rows(const double *rows, int n_layers, int width, double *out);

// After the step's scalars are summed: the estimate g = base * ref + sum coeff[i] v_i, with the
// coefficients in p->coeff; d [N*K] and rdots [N*K] (NULL without a reference) are scratch.
float update_coefficients(Pipeline *p, int use_cv, int guided, float *d, double *rdots);

// Evaluation of test chunk `chunk` (micro_batch rows): its input (the data, or the stage
// before's output), and its output (sent on, or scored into totals: loss * rows, hits).
int eval_input(Pipeline *p, const Dataset *ds, size_t chunk, float *x, FgError *err);
int eval_output(Pipeline *p, const Dataset *ds, size_t chunk, const float *y, double *totals,
                FgError *err);

// The out-of-core step (pipeline_stream.c): the same result as pipeline_step, run as
// layer-major waves over the stage's layer stream.
int stream_step(Pipeline *p, long step, long total, const size_t *order, size_t sample0,
                StepResult *out, FgError *err);
int stream_evaluate(Pipeline *p, const Dataset *ds, double *loss, double *acc, FgError *err);
// Set-up: stream_init decides whether the stage goes out of core (p->ooc) and opens its
// stores; stream_plan takes the B ops' order from the timetable; stream_free closes.
int stream_init(Pipeline *p, const LayerStreams *streams, FgError *err);
int stream_plan(Pipeline *p);
int stream_free(Pipeline *p, FgError *err);

#endif
