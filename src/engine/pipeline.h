// One pipeline stage at run time: the step engine. It executes its part of the step's
// timetable (ops F, B, U) against the stage's layer source (layer_source.h), exchanging
// activations, tangents and adjoints with its neighbours through a Transport. With one stage
// and transport_local() this is the single-rank trainer; nothing else is.
//
// The same engine runs a stage whose layers are resident and one that streams them: the
// source decides the grouping of ops (micro-batch-major or layer-major waves, exec_plan.h) and
// when an update is applied (at once, or as the next wave reads each layer).
//
// This is the engine's face to the run: the state it works on is engine_state.h's (below
// every unit of the engine), the timetable's choice timetable_choice.h's.
#ifndef FGPIPE_PIPELINE_H
#define FGPIPE_PIPELINE_H

#include "engine_state.h"
#include "timetable_choice.h"

// Builds the stage for transport t's stage. A stage that does not fit cfg->mem_budget keeps
// its layers in stores under cfg->weights_dir through `streams` (NULL: refused); resuming from
// those stores (streams->resume) sets p->first_step. If any stage streams, every stage runs
// layer-major (so neighbours agree on the order of messages). Plans the timetable (identical on
// every stage) with the op costs `costs` gives (a streamed stage's: nominal).
int pipeline_init(Pipeline *p, const Backend *be, const Config *cfg, const Model *m,
                  const int *first, Transport *t, const Dataset *train,
                  const LayerStreams *streams, int want_stats, OpCostSource costs, FgError *err);

// What stage `stage` of the layout `first` needs before pipeline_init makes it (the token
// table's row blocks are chosen by it, table_rows.h): in memory, and streamed besides its slots.
int pipeline_stage_needs(const Backend *be, const Config *c, const Model *m, const int *first, int stage,
                         int stages, int replicas, double *in_memory, double *streamed, FgError *err);

// Stage [first, last) of model m as cfg runs it: its buffers for cfg's micro-batch, K
// tangents, perturbation, low-rank tangents and local losses.
int pipeline_stage_init(Stage *st, const Backend *be, const Config *cfg, const Model *m, int first,
                        int last, FgError *err);
// This stage's ops as they ran, in op_cost's kinds: the mean seconds of each kind over the
// run's steps after its first 3 (B split into Bi and Bw in the planned ratio; a kind that never
// ran: as planned; clearing the gradient is inside the measured B or Bw: 0).
void pipeline_measured_costs(const Pipeline *p, double cost[N_OP_COSTS]);

// fg+bp's mix with shrink 0 updates a stage by its exact gradient alone: a timetable that
// backpropagates nothing on some stage (no bubble to fill, e.g. one stage with select = -1)
// is refused, as every rank sees the same timetable, by all of them alike.
int pipeline_check_every_stage_learns(const Config *cfg, const Schedule *S, FgError *err);

// Why the timetable is not planned with calibrated F times (config key calibrate_steps), or
// NULL where it is.
const char *pipeline_calibration_off(const Pipeline *p);
// Returns the first error of closing the stage's layer source (its last writes).
int pipeline_free(Pipeline *p, FgError *err);

// One optimizer step on samples order[sample0 ..) of the epoch's order.
int pipeline_step(Pipeline *p, long step, long total_steps, const size_t *order, size_t sample0,
                  StepResult *out, FgError *err);

// The run's bookkeeping rides on the step's one allreduce (op U sums the step's scalars over
// every rank): pipeline_reserve_run_scalars makes room for n doubles after the step's, which
// the run writes between steps and reads, summed, after the next step. No collective of its own.
void pipeline_reserve_run_scalars(Pipeline *p, int n);
double *pipeline_run_scalars(Pipeline *p);

// Applies an update still pending (streamed stages), so the weights are those of the run so far.
int pipeline_apply_pending(Pipeline *p, FgError *err);

// The run is accepted: a streamed stage's new store replaces the old one of its name (until
// now a refused run left it whole; LayerSource.publish). Collective over a node's replicas.
int pipeline_publish(Pipeline *p, FgError *err);

// Calls visit for every layer of the stage with parameters, in order, with the layer's
// checkpoint buffers as host memory: parameters, optimizer state buffers, the reference; a
// layer in row blocks block by block, in its slot (LayerVisitor).
// Pending updates are applied first. writable (a load): what visit writes becomes the stage's
// state, on which step next_step runs next (the run's first step).
int pipeline_visit_layers(Pipeline *p, int writable, long next_step, LayerVisitor visit, void *arg,
                          FgError *err);

// Brackets what replica 0 alone does with its layers (its checkpoint, evaluation,
// --save-params; on: 1 before, 0 after), called on every rank: where replicas on one node share
// a store, the pending update is applied by all of them first and the others wait at the
// bracket's end while the node's I/O rank reads alone. Nothing otherwise.
int pipeline_solo(Pipeline *p, int on, FgError *err);

// Mean loss and accuracy over a dataset, streamed through the pipeline (all stages get them)
// in passes of as many windows as the stage's memory holds (eval_pass.h). Once *stop is set (a
// signal; NULL: never) it ends before the next layer: *stopped on every stage, loss and acc NaN.
int pipeline_evaluate(Pipeline *p, const Dataset *ds, const volatile sig_atomic_t *stop, double *loss,
                      double *acc, int *stopped, FgError *err);

// Bytes held for backward ops at most at once: stashes of activations and Bi's adjoints, and
// the layer inputs that activity perturbation keeps for the update.
double pipeline_stash_bytes(const Pipeline *p);

#endif
