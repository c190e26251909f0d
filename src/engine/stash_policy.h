// The stash pool (StashPool) and its policy (StashPolicy, engine_state.h): what a stage keeps
// from op F (or Bi) for its backward ops, in buffers reused as micro-batches come and go. The
// policy is decided once at setup; the op code (pipeline_ops.c) calls through it and never asks
// whether the run recomputes.
#ifndef FGPIPE_STASH_POLICY_H
#define FGPIPE_STASH_POLICY_H

#include "engine_state.h"

// Sets p->stash from the run plan: every layer's input stashed, or the stage's input alone
// with a rerun (recompute = stage).
void stash_policy_init(Pipeline *p);

// The ring of buffers that hold what the F ops of `step` keep (a backward op takes them up to
// the timetable's lag later).
int stash_ring(const Pipeline *p, long step);

// F of lane a keeps what its micro-batch's backward ops will need, until the last of them.
void stash_hold(Pipeline *p, long step, Lane *a);

// A backward lane's buffers: the stash its F kept (recompute: the held input and a stash for
// the rerun), Bi's kept adjoints for Bw, and its output adjoint (the loss's on the last stage,
// else the message, which it takes; Bw: what Bi kept).
int stash_backward_lane(Pipeline *p, long step, Lane *a, FgError *err);

// The lane's op is done: the buffers whose last use it was go back to the pool.
void stash_lane_done(Pipeline *p, Lane *a);

// Frees the pool's idle buffers (those given back), so that their memory serves something else
// between steps (evaluation's windows, eval_pass.c); the next step takes new ones as it needs.
void stash_pool_trim(Pipeline *p);

#endif
