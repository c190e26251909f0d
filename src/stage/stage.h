// A stage: a contiguous run of layers [first, last) and the work buffers to run it.
//
// The same code runs the whole model on one rank (first = 0, last = n_layers) and one
// pipeline stage per rank. Parameters and gradients passed in are the stage's own slice of
// the model's flat buffers, starting at model_range_offset(model, first).
#ifndef FGPIPE_STAGE_H
#define FGPIPE_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "bf16.h"
#include "gemm.h"
#include "layer_plan.h"
#include "model.h"
#include "tangent.h"

// What a head fused with the loss (LAYER_HEAD_LOSS, head_loss.h) scores in op F: an argument of
// the call that runs its layer, inputs set by the caller, outputs read after.
typedef struct {
    const Label *labels;  // in: the rows' labels [rows * tokens] (backend memory)
    float weight;         // in: the scale of the rows' adjoints in op B (their records)
    float *d;             // in: host [K], the directional derivatives of the mean loss
                          // (activity perturbation: [K, rows * tokens], each row's own)
    float loss;           // out: the mean loss over the rows
    int correct;          // out: rows whose largest logit is the label's (no tangents only)
} HeadScore;

// All buffers (parameters, activations, stashes, gradients) are the backend's memory.
typedef struct {
    const Backend *be;
    const Model *model;
    int first, last;
    // The lowest layer B and Bi visit: first, but on the model's first stage the first layer
    // that trains (its input, the model's, takes no adjoint, so the frozen layers below, a LoRA
    // base's token table, have nothing to compute; last where none trains). stage_backward, the
    // reference gradient of every parameter, visits all.
    int backward_first;
    LayerPlan *plan;     // [model->n_layers], host: plan[l] of layer l (layer_plan.h)
    size_t param_base;   // model_range_offset(model, first)
    size_t param_count;  // parameters owned by the stage
    int max_rows;        // largest micro-batch the buffers hold
    int tangents;        // K (0: no forward-mode work)
    Perturbation perturb;  // where F's tangents enter (weight after stage_init; tangent.h)
    int tangent_rank;      // weight tangents of rank r (0: full; stage_set_tangent_rank)
    float *lowrank_work;   // one low-rank tangent's factors and products
    float *head_factors;   // a fused head's low-rank At [K, r, vocab] and x Btᵀ [K, rows, r]
    float *ones;           // [max_rows * tokens] of 1: adds a bias tangent to every token row
    int local_groups;      // local losses: G groups per hidden layer (0: none; perturb_local.c)
    float **local_head;    // [n_layers]: the fixed heads of a layer ending a local loss, or NULL
    float *local_work;     // the heads' d [K, max_rows, G] and one row's H e [max_width]
    int local_keeps;       // local losses on a streamed stage: F keeps each linear's inputs and
                           // estimates for U, when the layer is back in memory; resident, F
                           // folds them into the layer's update at once (stage_local_fold)
    float *act[2];       // ping-pong activations [max_rows, max_width]
    float *tan[2];       // ping-pong tangents [K, max_rows, max_width]
    float *adj[2];       // ping-pong adjoints [max_rows, max_width]
    float *pdot;         // tangents of one layer's parameters [K, largest layer]
    FgDtype act_type;    // the activations between layers (stage_act.c): FG_F32, or FG_BF16
    // FG_BF16: per model layer l, the values found not finite where what enters l was rounded:
    // [l] its input or input tangents (the forward), [n_layers + l] its input adjoint (the
    // backward); counts in backend memory (Backend.round16 adds to them where it rounds), which
    // the engine adds into its step scalars (summed over the ranks with the loss) and clears.
    // NULL: not counted.
    double *not_finite;
} Stage;

int stage_init(Stage *st, const Backend *be, const Model *m, int first, int last, int max_rows,
               int tangents, FgError *err);
void stage_free(Stage *st);

// The element type of activations (stage_act.c), set once at setup (stage_set_act_type; FP32
// unless set): layer l's input (l = last: the stage's output) is stage_act_type(st, l), BF16
// between layers of a BF16 stage, FP32 for the model's input and its last layer's output. The
// tangents of layer l's input and its adjoint have the same type. A stash's, a message's and Bi's
// kept adjoints are held in their layer's type; FG_BF16 values are converted by the backend's
// BF16 ops, where they lie (host or device memory).
void stage_set_act_type(Stage *st, FgDtype type);
FgDtype stage_act_type(const Stage *st, int l);
// Floats (4-byte words) n elements of layer l's input type take: BF16 two to a word.
size_t stage_act_floats(const Stage *st, int l, size_t n);
// The bytes of those words.
size_t stage_act_bytes(const Stage *st, int l, size_t n);
// A message across the cut before layer l: n values (activations, or adjoints) of layer l's
// input type, then K tangents of them in the same type (K = 0: none), in bytes.
size_t stage_message_bytes(const Stage *st, int l, size_t n, int K);
// base advanced by n elements of layer l's input type (BF16: 2 bytes each).
void *stage_act_at(const Stage *st, int l, void *base, size_t n);
// dst (layer l's input type) = x's n floats, rounded where BF16.
void stage_act_store(const Stage *st, int l, void *dst, const float *x, size_t n);
// Layer l's input as floats: src itself (FP32), or src widened into scratch (BF16).
const float *stage_act_load(const Stage *st, int l, const void *src, float *scratch, size_t n);
// x's n floats rounded in place to layer l's input type (nothing where FP32): each value where
// it is made, an output tangent (going up); an input adjoint (going down: stage_adjoint_round).
void stage_act_round(const Stage *st, int l, float *x, size_t n);
void stage_adjoint_round(const Stage *st, int l, float *x, size_t n);
// Layer l's output y [rows, out], rounded in place to the type of the next layer's input (every
// op F runs this where the output is made: stage_layer_forward, row blocks' last block).
void stage_round_output(const Stage *st, int l, float *y, int rows);
// Where values of layer l's input type are made as floats, to be kept in `kept` (NULL: nowhere;
// a stash's slot, Bi's kept adjoint): kept itself where it holds FP32, else the work buffer,
// from which stage_act_keep narrows them into kept. Every place that keeps what it makes uses
// the pair: op F's lanes, a recompute's rerun, the whole-stage passes.
float *stage_act_buffer(const Stage *st, int l, float *kept, float *work);
// kept (layer l's input type) = x's n floats, unless x is kept already (or kept is NULL).
void stage_act_keep(const Stage *st, int l, void *kept, const float *x, size_t n);

// Floats one micro-batch needs to keep for stage_backward: every layer's input and the
// stage's output.
size_t stage_stash_floats(const Stage *st, int rows);

// Op F: runs x [rows, in] through the stage. With `key` (step and micro-batch set), also
// propagates the tangents: xdot [K, rows, in] (NULL: zero) plus the parameter tangents
// v(key, layer, k), regenerated here; a local loss's head ends the tangent (the layer after it
// starts from zero). With `stash`, keeps what stage_backward needs. *y and *ydot point into
// the stage's buffers (or the stash) until the next call.
void stage_forward(Stage *st, const float *params, const TangentKey *key, const float *x,
                   const float *xdot, int rows, float *stash, const float **y,
                   const float **ydot);
// What a whole-stage op F takes besides its activations, per call (every member may be NULL):
// the tangents' key, the estimator's buffers (the stage's slices: guide replaces tangent k = 0,
// with ref, ref_dots[k] += ref . v_k over the stage's layers [K]) and a fused head's score.
typedef struct {
    const TangentKey *key;
    const float *guide, *ref;
    double *ref_dots;
    HeadScore *head;
} ForwardCall;
// stage_forward with them (stage_forward is this with the key alone).
void stage_forward_call(Stage *st, const float *params, const ForwardCall *call, const float *x,
                        const float *xdot, int rows, float *stash, const float **y,
                        const float **ydot);

// The parameter tangents of one layer in op F, and what F does with them while they are in
// memory. Every pointer is the layer's own part (not the stage's), or NULL.
typedef struct {
    TangentKey key;       // step and micro-batch (the layer is set per layer)
    const float *guide;   // replaces tangent k = 0 (the guided estimator)
    const float *ref;     // the estimator's reference: ref_dots[k] += ref . v_k, so the update
    double *ref_dots;     // needs no second pass over the tangents (cv, guided) [K]
} ParamTangents;

// One layer l of op F (a layer-major wave runs every micro-batch through layer l before the
// next): x [rows, in] through the layer with its parameters p (the layer's own, not the
// stage's) into y; with tangents (NULL: none), also xdot [K, rows, in] (NULL: zero) into ydot.
// A fused head (LAYER_HEAD_LOSS) scores `head` (its labels in, its loss out; NULL elsewhere).
// p16: p's BF16 copy (LayerSlot.params16), read by a BF16 backend's GEMMs, or NULL.
void stage_layer_forward(Stage *st, int l, const float *p, const uint16_t *p16,
                         const ParamTangents *tangents, HeadScore *head, const float *x,
                         const float *xdot, float *y, float *ydot, int rows);
// Op F of a head fused with the loss (layer l, LAYER_HEAD_LOSS): scores h's labels (and with
// tangents, those of its perturbation's row, or none when frozen, its d) and writes each row's
// record into rec [rows * tokens, HEAD_RECORD] (stage_head.c).
void stage_head_forward(Stage *st, int l, const float *p, const uint16_t *p16,
                        const ParamTangents *tangents, HeadScore *h, const float *x,
                        const float *xdot, float *rec, int rows);
// A token table in row blocks (Layer.block_rows > 0; stage_rows.c, CPU): ops F and B on its
// floats [first, first + count) (whole rows; p, grad: those rows), called on the blocks in
// ascending order, every number the whole layer's. F with weight tangents t (NULL: none; t's
// guide and ref: the block's rows) also writes the embedding's ydot [K, rows, out]. A fused
// head scores `labels` carrying each micro-batch's running softmax in `state`
// (stage_rows_state_bytes) from block to block, and after the last block stage_rows_finish
// writes its records into rec and h->loss, h->correct (with tangents h->d) from h->labels and
// h->weight. Backward: dx is started by block 0 and added to by the others; the embedding's
// input (token ids) has no adjoint.
size_t stage_rows_state_bytes(const Stage *st, int l, int rows);
// Whether op F of the inputs x [rows] reads block b of layer l at all (a token table reads
// its ids' rows; a head, every row).
int stage_rows_read(const Stage *st, int l, int b, const float *x, int rows);
void stage_rows_forward(Stage *st, int l, const float *p, size_t first, size_t count,
                        const ParamTangents *t, const float *x, const float *xdot,
                        const Label *labels, float *y, float *ydot, int rows, void *state);
void stage_rows_finish(const Stage *st, int l, const void *state, HeadScore *h, int tangents,
                       float *rec, int rows);
void stage_rows_backward(const Stage *st, int l, const float *p, int r0, int n, const float *x,
                         const float *dy, float *dx, float *grad, int rows);
// stage_layer_add_tangents on floats [first, first + count) of layer l (grad_l: those floats):
// the whole layer through the backend, a row block (CPU) in the same order of adds.
void stage_layer_add_tangents_part(const Stage *st, int l, TangentKey key, int n_mb,
                                   const float *coeff, size_t first, size_t count, float *grad_l);
// Where a stash keeps layer l's input (l = last: the stage's output), in floats (4-byte words:
// the inputs before it in their types).
size_t stage_stash_offset(const Stage *st, int layer, int rows);

// Op B: from the output adjoint dy [rows, out] and the stash of stage_forward, adds the
// parameter gradient into grad (+=) and writes the input adjoint into dx (NULL: skip).
void stage_backward(Stage *st, const float *params, const float *stash, const float *dy,
                    float *dx, float *grad, int rows);

// Op B split in two (zero-bubble schedules): Bi, the input adjoint the previous stage waits
// for, then Bw, the parameter gradient, whenever there is time. Bi then Bw gives the same bits
// as stage_backward.
// Floats (4-byte words) Bi keeps for Bw: the output adjoint [rows, out] of each layer with
// parameters, in the type of the next layer's input (stage_act_type).
size_t stage_adjoint_floats(const Stage *st, int rows);
// Where that buffer keeps layer `layer`'s output adjoint (a layer with parameters), in floats.
size_t stage_adjoint_offset(const Stage *st, int layer, int rows);
// Op Bi: from the stash and dy [rows, out], writes the input adjoint into dx (NULL: skip) and
// keeps each parameter layer's output adjoint in `adjoints`; no parameter gradient.
void stage_backward_input(Stage *st, const float *params, const float *stash, const float *dy,
                          float *dx, float *adjoints, int rows);
// Op Bw: adds the parameter gradient into grad (+=) from the stash's layer inputs and the
// adjoints Bi wrote for it; reads no parameters but a fused head's (params may be NULL without one).
void stage_backward_weight(Stage *st, const float *params, const float *stash,
                           const float *adjoints, float *grad, int rows);

// Activity perturbation (perturb == PERTURB_ACTIVITY; perturb_activity.c): op F adds tangent
// u_{b,k} [rows, out] of activity_key to every linear layer's output tangent instead of making
// parameter tangents, and the update needs each such layer's input x_{l,b}, saved from F until
// then (stage_saved_offset, perturbation.h).
// The activity estimate of layer l (with parameters): grad += G^T x (weights) and the column
// sums of G (bias), where G [n_mb * rows, out] stacks per micro-batch b < n_mb
// sum_k diag(coeff + (b*K + k) * rows) u_{b,k} (micro-batch key.microbatch + b), and
// x [n_mb * rows, in] are the layer's saved inputs, as floats. work holds G. On sequences (the GPT) u has a
// row per token on the layer's branch columns (layer_branch), and a sample's coefficient
// applies to all of its token rows.
void stage_layer_activity_estimate(const Stage *st, int l, TangentKey key, int n_mb, int rows,
                                   const float *coeff, const float *x, float *work, float *grad);

// Local losses (local_groups = G > 0, activity perturbation, CPU; local_loss.h): an activation
// layer right after a linear layer ends a local loss with fixed heads, and its output tangent
// goes no further. Makes the heads of the stage's layers (host memory); refuses a G that does
// not divide every hidden width.
int stage_set_local_groups(Stage *st, int groups, uint32_t seed, FgError *err);
void stage_free_local(Stage *st);
// Whether layer l ends a local loss (then layer l - 1, the linear, learns from it alone).
int stage_local_head(const Stage *st, int l);
// Whether linear layer l learns from a local loss folded in op F (a resident stage).
int stage_local_folds(const Stage *st, int l);
// Op F at such a layer l: from its output h [rows, out], its tangent hdot [K, rows, out], the
// linear's output tangent zdot (= u: nothing enters before it) and the labels, the linear's
// output-gradient estimate est [rows, out] = scale sum_k d_k[r, g(j)] u_k[r, j], d the groups'
// directional derivatives (local_loss_jvp). After a ReLU, u is hdot: the dead units, whose
// gradient is known to be 0, drop out (still unbiased, less variance).
void stage_local_output_grad(const Stage *st, int l, const float *h, const float *hdot,
                             const float *zdot, const Label *labels, int rows, float scale,
                             float *est);
// Where the estimate of linear layer l sits in its block of what F keeps for `rows` rows
// (stage_saved_offset), in floats: after the layer's inputs.
size_t stage_local_estimate_offset(const Stage *st, int l, int rows);
// The update of that linear layer l: grad += est^T x, db += column sums of est, over rows.
void stage_local_weight_grad(const Stage *st, int l, int rows, const float *x, const float *est,
                             float *grad);
// Micro-batch mb's part of linear layer l's estimate (rows of inputs x and estimates est) into
// grad, which micro-batch 0 starts: op F on a resident stage, op U on a streamed one, the same
// products in the same order either way.
void stage_local_fold(const Stage *st, int l, int mb, int rows, const float *x, const float *est,
                      float *grad);

// Low-rank weight tangents (perturb = weight, rank r > 0; docs/design.md section 4): a linear
// layer's weight tangent is V = At^T Bt / sqrt(r) with At [r, n] and Bt [r, k] ~ N(0, 1) for
// its weight W [n, k] (per token: branch output n, branch input k; layer.h), so that
// E[vec V vec V^T] = I; its bias tangent vb [n] ~ N(0, 1). Making one costs r (n + k) + n
// values instead of n k + n, and its JVP term x V^T + vb two thin GEMMs. The other layers with
// parameters (LayerNorm, embedding) keep full tangents. Allocates the work buffers.
void stage_set_tangent_rank(Stage *st, int rank);
// Whether layer L takes low-rank tangents on this stage (a linear layer, rank > 0).
int stage_layer_lowrank(const Stage *st, const Layer *L);
// Op F's parameter term of a low-rank tangent (key's layer and k set): the branch of ydot
// [rows * tokens, out per token] += x V^T + vb on every token; with ref (the layer's part of the
// reference), *ref_dot += ref . v.
void stage_lowrank_jvp_term(Stage *st, const Layer *L, TangentKey key, const float *x, int rows,
                            float *ydot, const float *ref, double *ref_dot);
// stage_layer_add_tangents and stage_layer_tangent_dots of a low-rank layer (key's layer set).
void stage_lowrank_add_tangents(const Stage *st, const Layer *L, TangentKey key, int n_mb,
                                const float *coeff, float *grad_l);
void stage_lowrank_tangent_dots(const Stage *st, const Layer *L, TangentKey key, int n_mb,
                                const float *x_l, double *dots);
// grad_l += sum over b < n_mb, k < K of coeff[b*K + k] v(key.microbatch + b, k) for layer l
// (with parameters): the forward-gradient estimate of one layer, full or low-rank.
void stage_layer_add_tangents(const Stage *st, int l, TangentKey key, int n_mb,
                              const float *coeff, float *grad_l);
// dots[b*K + k] += v(key.microbatch + b, k) . x_l over layer l's parameters.
void stage_layer_tangent_dots(const Stage *st, int l, TangentKey key, int n_mb, const float *x_l,
                              double *dots);

// grad += sum over micro-batches b < n_mb and tangents k < K of
//         coeff[b*K + k] * v(key with microbatch = key.microbatch + b, k),
// the forward-gradient estimate regenerated from the seed.
void stage_add_tangents(const Stage *st, TangentKey key, int n_mb, const float *coeff,
                        float *grad);

// dots[b*K + k] = v(key with microbatch = key.microbatch + b, k) . x over the stage's
// parameters: the stage's share of c . v_b for the control-variate estimator.
void stage_tangent_dots(const Stage *st, TangentKey key, int n_mb, const float *x, double *dots);
// The same, one row of n_mb*K per layer of the stage (rows of layers without parameters stay
// 0): summing rows in layer order gives the same bits however the model is cut into stages.
void stage_tangent_dots_by_layer(const Stage *st, TangentKey key, int n_mb, const float *x,
                                 double *dots);

#endif
