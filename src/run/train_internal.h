// What the parts of the run driver share: train.c (the run: open, steps, stop and checkpoint
// policy, finish), train_state.c (checkpoints, --save-params, the replica check) and
// train_report.c (files and lines that report the run).
#ifndef FGPIPE_TRAIN_INTERNAL_H
#define FGPIPE_TRAIN_INTERNAL_H

#include <stdio.h>

#include "pipeline.h"
#include "train.h"

// The stage's state from checkpoint `path` (refused if it does not fit the run of `total`
// steps); the pipeline's first step becomes the checkpoint's.
int state_load_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout, long total,
                          FgError *err);
// Only the weights (--init-from): any seed, the run starts at step 0 with fresh optimizer state.
int state_load_weights(Pipeline *p, Storage *io, const char *path, const int *layout, FgError *err);
// A checkpoint of the state on which step next_step runs (collective over the pipeline).
int state_save_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout, long next_step,
                          FgError *err);
int state_check_replicas_agree(Pipeline *p, FgError *err);
int state_save_params(Pipeline *p, const char *path, FgError *err);

// The first layer of each stage into res->layout (how it was cut: res->layout_by, and per stage
// the timed work it balanced: res->work_stage); collective over the world.
int layout_plan(const Config *c, const TrainEnv *e, const Model *m, TrainResult *res, FgError *err);

char *report_config_text(const Config *c);  // the resolved config in file syntax (free it)
FILE *report_open_in_dir(const char *dir, const char *name, FgError *err);
FILE *report_open_loss_csv(const char *dir, long first_step, FgError *err);
void report_print_layout(const Model *m, const TrainResult *res, int M, const Pipeline *p);
// The last step as it ran, on every stage (free measured->ops).
// The last step's phase with the times it ran (one phase); free with report_free_measured.
int report_gather_measured(Pipeline *p, Schedule *measured, FgError *err);
void report_free_measured(Schedule *measured);
int report_write_trace(const Schedule *planned, const Schedule *measured, const char *path, FgError *err);

#endif
