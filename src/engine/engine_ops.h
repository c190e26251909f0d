// What the units of the step engine below pipeline.c call of one another: pipeline_ops.c (op
// groups F and B, messages), loss_end.c (the loss end of F), pipeline_update.c (op U: the
// estimate, clipping, statistics, applying updates), and below both of these
// pipeline_messages.c (the step's messages) and pipeline_layers.c (layer access, what F keeps
// for U). The state they share is engine_state.h's; the run's options are resolved once into
// Pipeline.run (run_plan.h), where the layers live and when they update into the source and
// update plans (source_plan.c, update_plan.c).
#ifndef FGPIPE_ENGINE_OPS_H
#define FGPIPE_ENGINE_OPS_H

#include "engine_state.h"

// Whether F of micro-batch mb keeps a stash in this step (some backward op will use it).
int ops_keeps_stash(const Pipeline *p, long step, int mb);

// Micro-batch mb of the step's inputs (x) or labels (either may be NULL): samples of the
// epoch's order, or text windows drawn for (seed, step, global micro-batch) (an error: a
// token outside the vocabulary).
int ops_gather_microbatch(const Pipeline *p, long step, int mb, const size_t *order,
                          size_t sample0, float *x, Label *labels, FgError *err);

// loss_end.c: the last stage's end of op F and of evaluation (LossEnd), for the model's last
// layer: scored in a fused head's layer, or from logits.
const LossEnd *loss_end_of(const Pipeline *p);

// pipeline_layers.c: the stage's layers and what F keeps of them for U.
// The next layer after l (before l when dir < 0) that has parameters, or -1; the first.
int layers_next_param(const Pipeline *p, int l, int dir);
int layers_first_param(const Pipeline *p);

// Acquires layer l's parts and starts reading the next layer with parameters in direction dir
// (a streamed stage's read-ahead). Releases them, with the parts written in dirty.
// A layer in row blocks (Layer.block_rows) is refused: its passes take block b at a time
// (_block; a layer without blocks is its block 0).
int layers_acquire(Pipeline *p, int l, int dir, unsigned parts, LayerSlot *s, FgError *err);
int layers_release(Pipeline *p, int l, unsigned parts, unsigned dirty, FgError *err);
int layers_acquire_block(Pipeline *p, int l, int b, int dir, unsigned parts, LayerSlot *s,
                         FgError *err);
// The same, reading ahead block next_block of l (-1: none) rather than b + 1.
int layers_acquire_block_then(Pipeline *p, int l, int b, int next_block, int dir, unsigned parts,
                              LayerSlot *s, FgError *err);
int layers_release_block(Pipeline *p, int l, int b, unsigned parts, unsigned dirty, FgError *err);
// Whether this rank changes the layers it acquires: not a replica that reads its node's shared
// slots (LayerSource.reads_only), whose I/O rank applies every change once.
int layers_writes(const Pipeline *p);
// Whether layer l is one of the stage's.
int layers_held(const Pipeline *p, int l);
// Shared slots: every replica of the node reaches this point (LayerSource.sync); else nothing.
int layers_sync(Pipeline *p, FgError *err);
// What the F ops of `step` keep of layer l for U (its perturbation's saved_floats for the step's
// N * B rows): activity's inputs [N * B, in] in their type, a local loss's then its estimate.
float *layers_saved(const Pipeline *p, long step, int l);

// Offsets into p->scalars.
size_t scalars_d(const Pipeline *p);          // d [N * d_per_microbatch]
size_t scalars_ref_dots(const Pipeline *p);   // r.v [R][L][Nr*K]
size_t scalars_grad_norms(const Pipeline *p); // |grad_l|^2 [L]
size_t scalars_not_finite(const Pipeline *p); // values not finite entering layer l [2][L] (Stage.not_finite)
// Stage.not_finite's counts (backend memory) added into the step's scalars and cleared; nothing
// where the stage counts none (an fp32 run).
void pipeline_read_not_finite(Pipeline *p);

// pipeline_messages.c. Bytes of a forward message into `layer` for `rows` samples: activations,
// then K times as many tangents (none with local losses), in the layer's input type; and of a
// plain one across the same cut, its values alone (B's adjoints, evaluation's activations).
size_t messages_forward_bytes(const Pipeline *p, int layer, int rows);
size_t messages_plain_bytes(const Pipeline *p, int layer, int rows);

// Receives the next message of the step's plan into the inbox (posted one ahead); *msg points
// at it until n_inbox - 1 later messages have been taken.
int messages_take(Pipeline *p, long step, const void **msg, FgError *err);
// Posts the step's first receive.
int messages_start(Pipeline *p, long step, FgError *err);

// Marks the row blocks of the stage's first layer that step's forward reads (tt.ends.wrap_blocks,
// where there is one), for the read-ahead of the wave before it.
int ops_mark_wrap_blocks(Pipeline *p, long step, FgError *err);

// Op groups: the ops plan.op[g->first ..) of one kind. ops_prepare_lanes fills p->work.lanes with
// those that run this step and takes their messages (stage 0: gathers its inputs); the group
// then passes its lanes through the stage's layers together. *loss_sum collects the last
// stage's losses; first_of_step: the step's first F group; last_w: whether this is the step's
// last group with B or Bw ops (the gradient is complete after it).
int ops_prepare_lanes(Pipeline *p, long step, const OpGroup *g, const size_t *order, size_t sample0,
                      int *n_lanes, FgError *err);
int ops_forward_group(Pipeline *p, long step, int n_lanes, const size_t *order,
                      size_t sample0, double *loss_sum, FgError *err);
int ops_backward_group(Pipeline *p, long step, long total, int n_lanes, int last_w, FgError *err);
// The lanes through every layer of the stage; step < 0: without tangents (evaluation).
int ops_forward_layers(Pipeline *p, long step, Lane *lanes, int n, FgError *err);

// Where op U forms layer l's estimate (fg, fg+bp): a tied copy's own buffer, the stage's
// estimate (resident), or the one layer buffer (streamed).
float *update_estimate_of_layer(Pipeline *p, int l);

// update_plan.c: when the stage applies its updates, where it finishes and sums its gradients
// and where op U's estimates live (UpdateState's plan fields), decided once, at setup, from
// where the layers live.
void update_plan(Pipeline *p);
// At point `at` of step `step` (AT_LOAD: the version a load writes): begins the layer source's
// next weight version and applies a pending update where p->upd.when says so, else nothing.
int update_at(Pipeline *p, UpdatePoint at, long step, FgError *err);

// Acquires block b of layer l (layer_block; 0: a layer without blocks) for the forward pass,
// reading ahead its block next_block (-1: none): applies a pending update first (a streamed
// stage; its weights are written back). Releases with layers_release_block (pipeline_layers.c).
int update_acquire_for_forward(Pipeline *p, int l, int b, int next_block, LayerSlot *s, unsigned *parts,
                               unsigned *dirty, FgError *err);

// Layer l's gradient for op U (of the slot's rows: a layer in row blocks is finished block by
// block, in ascending order). fresh: after the step's last B or Bw op on the layer, the new
// gradient: summed over the replicas (streamed: here; resident: the whole stage before),
// averaged (fg+bp's c is the mean of the stage's corrections) and held for the update; bp
// streamed without clipping updates the layer here. Fresh or held from an earlier step: its
// squared norm into the scalars. Returns the parts written in *dirty.
int update_finish_layer_gradient(Pipeline *p, long step, long total, int l, LayerSlot *s, int fresh,
                                 unsigned *dirty, FgError *err);

// Op U. *waited: seconds spent in sums waiting for other ranks (idle time, not work).
int update_op(Pipeline *p, long step, long total, double *waited, FgError *err);

// The pending update applied to layer l's slot (weights acquired, and the step part when the
// update reads it). Returns the parts written.
unsigned update_apply(Pipeline *p, int l, LayerSlot *s);

// Applies an update still pending (pipeline_update.c). Declared here for its definer and in
// pipeline.h for the run: pipeline.c sees both, so the compiler holds them equal.
int pipeline_apply_pending(Pipeline *p, FgError *err);

#endif
