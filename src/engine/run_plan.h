// What a run does, resolved once from its Config: the engine reads these fields instead of
// re-deriving them from the options (which estimator `auto` means, whether F dots a reference,
// how many directional derivatives a micro-batch has, ...). Pure: no MPI, no buffers.
#ifndef FGPIPE_RUN_PLAN_H
#define FGPIPE_RUN_PLAN_H

#include "config.h"
#include "estimator.h"
#include "gemm.h"
#include "perturbation.h"
#include "schedule.h"

// What a stage keeps from op F for its backward ops (StashPolicy, stash_policy.c; its sizes:
// stash_sizes, mem_account.h): every layer's input, or the stage's input alone, from which each
// backward op reruns F (recompute = stage).
typedef enum { KEEP_LAYER_INPUTS, KEEP_STAGE_INPUT, N_STASH_KINDS } StashKind;

typedef struct {
    int tangents;            // K per micro-batch; 0 in bp and where fg weighs 0 (no tangents)
    int forms_estimate;      // op U forms an estimate (fg, fg+bp); bp applies its gradient
    int all_microbatches;    // R * N: the step's over every replica (they name the tangents)
    int saves_inputs;        // F keeps layer inputs for U (activity, local losses): each
                             // replica forms the estimate of its own micro-batches
    int d_per_sample;        // F's directional derivatives are per sample (activity)
    int sends_tangents;      // F's messages carry tangents (not with local losses)
    int d_per_microbatch;    // directional derivatives per micro-batch: K, or K per sample
    EstimatorKind estimator; // how op U weighs the derivatives (fg and fg+bp)
    float shrink;            // the estimator's weight of its noisy term (1 for fg, guided)
    int dots_reference;      // F dots a reference (the step before's c) with its tangents
    int guided;              // tangent 0 follows the reference (estimator guided)
    int exact_in_step;       // micro-batches 0..exact_in_step-1 of each replica are exact in
                             // this step's c (an explicit select at lag 0): not estimated
    int grad_delay;          // bp: steps a gradient waits before its update
    int recompute;           // F keeps the stage's input alone, B (or Bi) reruns F from it
                             // (recompute = stage in a mode with B ops)
    StashKind stash;         // what F keeps for B: KEEP_STAGE_INPUT with recompute
    // What the mode asks of the engine (bp, fg, fg+bp), so that no step code tests the mode:
    int backprops;           // B ops run (bp, fg+bp): loss adjoints, a gradient per layer
    int corrects;            // fg+bp: the B ops' mean gradient c corrects the estimate (and
                             // becomes the next step's reference)
    int clips_gradient;      // bp with clip_norm: the update waits for the gradient's global norm
    int keeps_gradient;      // the update reads the gradient after the B wave that made it
                             // (corrects or clips_gradient)
    ScheduleMode schedule;   // the timetable's kind
    int select;              // fg+bp's explicit select (n micro-batches), else -1
    int fills_bubbles;       // fg+bp: B ops fill fg's bubbles, planned with F's times (the
                             // start-up may calibrate them)
    int chooses_timetable;   // fg+bp auto whose update is c alone: a choice among candidate
                             // timetables (timetable_choice.c)
    int stashes_in_flight;   // micro-batches a stage keeps stashes for at once, before the
                             // timetable says (memory estimates)
    int adjoints_in_flight;  // ... and input adjoints Bi keeps for Bw
    FgDtype activations;     // between layers, in stashes and in F's messages (stage_act.c):
                             // FG_BF16 with precision = bf16 (CPU or GPU), else FG_F32
} RunPlan;

// What a stage's run needs of its layers, derived from the config (layer_needs).
typedef struct {
    int opt_buffers;       // optimizer state buffers
    int ref;               // the estimator keeps a reference (cv, guided)
    int grad;              // B ops run (bp, fg+bp)
    int keep_grad;         // the update reads the gradient after the B wave that made it
    int prev;              // previous weight versions held: the largest lag of a B op
    int weights16;         // the GEMMs read a BF16 copy of their layers' weights, made where
                           // the weights are written (precision = bf16, on either device)
} LayerNeeds;

LayerNeeds layer_needs(const Config *c);

// The plan of cfg's run with `replicas` data-parallel pipelines.
RunPlan run_plan(const Config *cfg, int replicas);

// Whether micro-batch mb of a replica is inside this step's c (its estimate is left out).
static inline int run_plan_exact(const RunPlan *r, int mb) { return mb < r->exact_in_step; }

#endif
