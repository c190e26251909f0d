// What the parts of the run driver share: train.c (the run: open, steps, stop and checkpoint
// policy, finish), train_state.c (checkpoints, --save-params, the replica check) and
// train_report.c (files and lines that report the run).
#ifndef FGPIPE_TRAIN_INTERNAL_H
#define FGPIPE_TRAIN_INTERNAL_H

#include <stdio.h>

#include "out_file.h"
#include "pipeline.h"
#include "train.h"

// The stage's state from checkpoint `path` (refused if it does not fit the run of `total`
// steps); the pipeline's first step becomes the checkpoint's.
int state_load_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout, long total,
                          FgError *err);
// Only the weights (--init-from): any seed, the run starts at step 0 with fresh optimizer state.
int state_load_weights(Pipeline *p, Storage *io, const char *path, const int *layout, FgError *err);
// Checks, before the run touches any file, that the stage (layout[stage]..) can load
// `path`: resume, as state_load_checkpoint does (the run has `total` steps); else as
// state_load_weights. Reads the checkpoint's config and tensor shapes, not its tensors.
int state_check_input(const Config *c, const Model *m, Storage *io, const char *path, int resume,
                      const int *layout, int stage, int stages, long total, FgError *err);
// A checkpoint of the state on which step next_step runs (collective over the pipeline):
// replica 0 writes it; called on every rank (pipeline_solo).
int state_save_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout, long next_step,
                          FgError *err);
int state_check_replicas_agree(Pipeline *p, FgError *err);
// --save-params: replica 0 writes the file; called on every rank (pipeline_solo).
int state_save_params(Pipeline *p, const char *path, FgError *err);

// The config's model (MLP or GPT), with its frozen layers marked.
// training: the model a run trains (a GPT's head fused with its loss, head_loss.h); else the
// one inference reads (its logits whole).
int train_build_model(const Config *c, int training, Model *m, FgError *err);
// model = llama's shape from the config (training: the head fused with the loss).
LlamaShape train_llama_shape(const NetConfig *n, int training);

// The first layer of each stage into res->layout (how it was cut: res->layout_by, and per stage
// the timed work it balanced: res->work_stage); collective over the world.
int layout_plan(const Config *c, const TrainEnv *e, const Model *m, TrainResult *res, FgError *err);
// The token table's row blocks for mem_budget (table_rows.h), chosen on m before the stage is
// made, with the runtime this process holds now.
int layout_table_rows(const Config *c, const TrainEnv *e, Model *m, const int *layout, FgError *err);
// Its parts. Whether a run of c on M stages cuts by timed work (boundaries = auto, in memory);
// every layer's op costs as one rank times them, cost[l * N_OP_COSTS + kind]; the cut: by
// boundaries, or by parameter counts unless layer_cost's cut makes the largest stage clearly
// (15%) faster under layer_cost (*by_work = 1 then; why: the figures behind the choice, "" when
// the two cuts agree; each may be NULL), and each stage's work per step into work (may be NULL).
int layout_is_timed(const Config *c, int M);
int layout_time_layers(const Config *c, const Backend *be, const Model *m, int replicas,
                       double *cost, FgError *err);
int layout_cut(const Config *c, const Model *m, int M, const double *layer_cost, int *layout,
               double *work, int *by_work, char *why, size_t why_size, FgError *err);

char *report_config_text(const Config *c);  // the resolved config in file syntax (free it)
// --out's config.txt (whole or absent) and loss.csv (whole lines; a resume keeps the rows
// before first_step).
int report_write_config(const Config *c, const char *dir, FgError *err);
int report_start_loss_csv(LineFile *lf, const char *dir, long first_step, FgError *err);
void report_print_layout(const Model *m, const TrainResult *res, int M, const Pipeline *p);
// The stage's memory account into the run's figures (stage s's column; data: the rank's data).
void report_memory_of_stage(const MemAccount *a, double data, int s, StageFigures *out);
// After the first step: every stage's activation peak so far, one line from the reporter.
int report_activations_after_first_step(Pipeline *p, int reporter, FgError *err);
// A streamed stage's bound after `steps` steps (layer_io_bound): on stderr, one line.
void report_io_bound(const Config *c, const Transport *t, const LayerSource *src, const IoBound *b,
                     int steps);
// One streamed step's I/O (io_every_step): bytes, I/O and compute seconds, the bound.
void report_io_step(const Transport *t, long step, double seconds, double waves_bound, const IoBound *b);
// The last step's phase with the times it ran (one phase), on every stage: collective over the
// pipeline; free with report_free_measured.
int report_gather_measured(Pipeline *p, Schedule *measured, FgError *err);
// Its two halves around the sum, for a sum that rides on a step (pipeline_run_scalars): this
// stage's times of the last step's ops into times [2 * n_ops] (0 elsewhere); phase `phase`
// with times summed over the stages.
void report_local_measured(const Pipeline *p, double *times);
void report_measured_schedule(const Pipeline *p, int phase, const double *times, Schedule *measured);
void report_free_measured(Schedule *measured);
int report_write_trace(const Schedule *planned, const Schedule *measured, const char *path, FgError *err);

#endif
