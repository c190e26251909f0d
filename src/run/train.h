// Training on one pipeline: every rank runs this with its own Transport (stage); the whole
// model on one rank is the case of one stage.
#ifndef FGPIPE_TRAIN_H
#define FGPIPE_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "storage.h"
#include "backend.h"
#include "common.h"
#include "config.h"
#include "layer_stream.h"
#include "mem_account.h"
#include "op_cost.h"
#include "schedule.h"
#include "transport.h"

// Per stage, indexed by stage (arrays, so that a sum over the ranks fills them at once).
typedef struct {
    double peak_rss[SCHED_MAX_STAGES];     // bytes
    double stash_bytes[SCHED_MAX_STAGES];  // activations kept for B ops, at most at once
    // Counted as allocated (mem_account.h): the activations' peak together, and each owner's
    // peak bytes (the data: what the rank loaded, mapped files included).
    double activation_peak[SCHED_MAX_STAGES];
    double memory[N_MEM_OWNERS][SCHED_MAX_STAGES];
    // Measured work: seconds of a step's F and U (bp: F and B) ops, timed layer by layer.
    double work[SCHED_MAX_STAGES];
    // fg+bp: corrections (Bw ops) per step, the largest lag of the B ops, the share of the
    // bubble used by B ops planned and in the last step as it ran.
    double corrections[SCHED_MAX_STAGES], lag[SCHED_MAX_STAGES];
    double bubble_used[SCHED_MAX_STAGES], bubble_used_measured[SCHED_MAX_STAGES];
} StageFigures;

typedef struct {
    long steps;
    double first_loss;     // mean training loss of the run's first loss_window steps
    double final_loss;     // ... and of its last loss_window steps
    int loss_window;       // 20 where the run has 40 steps or more; else 1: the first and the
                           // last step's loss (two windows of 20 would overlap)
    double test_loss, test_acc;
    double samples_per_s;  // training samples / training wall time (evaluation excluded)
    double train_seconds;
    double step_seconds;   // median wall time of a step on this stage
    size_t peak_rss_bytes; // of this rank
    StageFigures per_stage;  // every stage's figures
    size_t n_params;
    int stages;
    double makespan_vs_fg;  // planned step time over FG's of the same costs
    int layout[SCHED_MAX_STAGES + 1];  // first layer of each stage, then n_layers
    const char *timetable;  // the timetable the run chose (schedule_mode_name: bp-zb, fg+bp, ...)
    const char *layout_by;  // how the stages were cut: "boundaries", "measured work", "parameters"
    char layout_why[160];   // boundaries = auto: why that cut ("" where both cuts agree)
    double bubble_planned, bubble_used_by_b;    // of the timetable
    double op_costs[N_OP_COSTS * SCHED_MAX_STAGES];  // [kind * stages + stage]: seconds the
                           // timetable was planned with (op_cost.h; fgpipe plan --costs)
    double measured_costs[N_OP_COSTS * SCHED_MAX_STAGES];  // the same as the ops ran
                           // (pipeline_measured_costs; fgpipe plan --costs --measured)
    double bubble_measured, bubble_used_measured;  // of the last step as it ran
    long first_step;       // 0, or where a resumed run started
    int stopped;           // ended early on a stop request (after writing a checkpoint)
} TrainResult;

// What a run computes with, made by the caller in this order (mpi/main.c): the backend, the
// transport between stages (its messages in the backend's memory), the storage of checkpoints
// and logs, and the layer stores of out-of-core stages.
typedef struct {
    const Backend *be;
    Transport *tr;
    Storage *storage;             // NULL: no checkpoints, no log
    const LayerStreams *streams;  // NULL: no out-of-core stages (cfg mem_budget, weights_dir)
} TrainEnv;

// What a run reads besides the config; each may be NULL.
typedef struct {
    const char *resume_path;                // continue from this checkpoint
    const char *init_from;                  // start from this checkpoint's weights, at step 0
                                            // with fresh optimizer state (transfer learning)
    volatile sig_atomic_t *stop_requested;  // set by a signal: checkpoint after the next step
                                            // boundary and return (every stage agrees first)
} TrainInputs;

// Where a run writes; each may be NULL.
typedef struct {
    const char *out_dir;          // config.txt, loss.csv (written by the last stage)
    const char *trace_path;       // planned and measured timeline of the last step (Chrome trace)
    const char *params_path;      // final parameters, raw float32 in the flat layout, every stage
                                  // writing its own range (for tests and tools)
    const char *checkpoint_path;  // written every checkpoint_every steps and at the end
    long checkpoint_every;        // 0: only at the end (and on a stop request)
    const char *log_path;         // per-step log (docs/log.md), written by the last stage
} TrainOutputs;

// Runs the configured training as env->tr's stage; progress comes from the last stage. in and
// out may be NULL.
int train_run(const Config *cfg, const TrainEnv *env, const TrainInputs *in,
              const TrainOutputs *out, TrainResult *res, FgError *err);

// Writes the result as one JSON object (the --summary-json format).
int train_write_summary(const Config *cfg, const TrainResult *res, const char *path, FgError *err);

size_t peak_rss_bytes(void);

// The end of the run's line of memory: the activation peak by stage (counted as allocated) and
// the whole stages' peak bytes by owner, against peak RSS.
void train_print_memory(const TrainResult *r, FILE *out);

#endif
