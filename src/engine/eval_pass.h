// Evaluation in passes (docs/out-of-core.md, "Evaluation in passes"): the validation set's windows
// (micro-batches of it) go through the stage's layers layer-major, as many at a time as the
// stage's memory holds, so a streamed stage reads its store once a pass, not once a window.
// The windows of a pass are held between layers in buffers of their own; their memory is what
// the step's stash pool takes in a step (planned within the budget, idle between steps), so a
// pass holds more windows than the step's own lanes only where the step keeps stashes (bp,
// fg+bp). Every window is scored as the step scores it and the sums are taken window by window
// in order: the loss and accuracy are those of any other grouping, bit for bit.
//
// A stop request (the run's signal flag) ends an evaluation before the next layer: the stages
// say so to each other with each pass, and none waits for a message that will not come.
#ifndef FGPIPE_EVAL_PASS_H
#define FGPIPE_EVAL_PASS_H

#include "engine_state.h"

// Decides p->eval once at setup: the windows a pass takes at most, from lent_bytes (what the
// step's stash pool may hold, pipeline_setup.c) over a window's bytes, at least the step's
// largest op group; a stage that streams its layers says it on stderr. Each evaluation takes at
// most what the pool has held at once (so a run's memory never grows by it).
void eval_pass_plan(Pipeline *p, double lent_bytes);

#endif
