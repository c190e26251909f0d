// Perturbations: where op F's random tangents enter a layer with parameters, what F keeps for
// op U, and what U forms from them (docs/design.md section 4). One table row per kind, each in
// its own file; the engine calls a layer's row and never tests the kind.
//
//   perturb_weight.c    full weight tangents v ~ N(0, I) over the layer's parameters
//   perturb_lowrank.c   a linear layer's weight tangent At^T Bt / sqrt(r) (tangent_rank = r)
//   perturb_activity.c  a tangent on every linear layer's output, one per sample
//   perturb_local.c     activity tangents judged by a local loss at the next activation
//
// Adding one: a file with its row, a case in stage_perturbation, its config key and tests.
#ifndef FGPIPE_PERTURBATION_H
#define FGPIPE_PERTURBATION_H

#include "stage.h"

// What op U hands a perturbation to form fg's estimate of one layer's gradient.
typedef struct {
    uint32_t seed;
    long step;               // the step whose F made the tangents
    int first_microbatch;    // this replica's first micro-batch (global index)
    int replica_microbatches;  // this replica's micro-batches (their inputs are saved here)
    int all_microbatches;    // every replica's (weight tangents regenerate for any of them)
    int rows;                // rows per micro-batch
    const float *coeff;      // the estimate's coefficients, per global micro-batch from 0:
                             // [all_microbatches * d per micro-batch]
    const float *saved;      // what F saved of this layer (saved_floats' block) or NULL
    float *widened;          // FP32 scratch for the layer's saved inputs where F kept them in
                             // BF16 (stage_saved_widened_floats), else NULL
    float fg_weight;         // the weight of fg's part (local losses: formed in F unweighted)
    float *work;             // [replica_microbatches * rows * widest layer] of scratch
    size_t first, count;     // the floats of the layer estimated: all, or a row block's
                             // (Layer.block_rows; weight tangents only)
} PerturbEstimate;

typedef struct {
    const char *name;
    // Directional derivatives per sample (the tangents differ per sample), not per micro-batch.
    int d_per_sample;
    // Floats (4-byte words) F keeps of layer l for U for `rows` rows, the step's micro-batches one
    // after the other (NULL: nothing; the estimate regenerates). The layer's inputs are kept in
    // their type (stage_act_type: BF16 in a bf16 run, exact since they are BF16 values already).
    size_t (*saved_floats)(const Stage *st, int l, size_t rows);
    // Op F: y and ydot [K, rows, out] of layer l (with parameters, not frozen) from x, xdot
    // (NULL: zero) and this perturbation's parameter term, with the estimator's extras of t; p16:
    // p's BF16 copy (LayerSlot.params16) or NULL.
    void (*jvp)(Stage *st, int l, const float *p, const uint16_t *p16, const ParamTangents *t,
                const float *x, const float *xdot, float *y, float *ydot, int rows);
    // Op U: grad_l += fg's estimate of layer l's gradient; with sets_estimate, grad_l = it
    // (what op F folded into grad_l, weighed: the estimator's other terms are added after).
    void (*estimate)(const Stage *st, int l, const PerturbEstimate *e, float *grad_l);
    int sets_estimate;
    // Op F of a fused head (stage_head.c): the tangents of its logits besides xdot's, with t's
    // estimator extras; the result may point into *key (the caller's).
    HeadTangents (*head_tangents)(Stage *st, int l, const ParamTangents *t, const float *x,
                                  int rows, TangentKey *key);
} PerturbationOps;

extern const PerturbationOps perturb_weight, perturb_lowrank, perturb_activity, perturb_local;

// The perturbation of layer l of the stage (a layer with parameters).
const PerturbationOps *stage_perturbation(const Stage *st, int l);
// The row that stands for a run's `perturb` choice: whether F keeps anything for U
// (saved_floats) and whether its directional derivatives are per sample.
const PerturbationOps *perturbation_of_kind(Perturbation kind);

// What F keeps for U, for `rows` rows (the step's micro-batches one after the other): per layer
// with parameters, in layer order, its saved_floats(l, rows) block.
size_t stage_saved_offset(const Stage *st, int layer, int rows);
size_t stage_saved_floats(const Stage *st, int rows);
// U's FP32 copy of one layer's saved inputs where F keeps them narrower (BF16), for `rows` rows:
// the widest such layer's floats (PerturbEstimate.widened), 0 where none is.
size_t stage_saved_widened_floats(const Stage *st, int rows);

// The activity row's jvp and head tangents, which the local row shares (the tangent enters the
// same way).
void perturb_activity_jvp(Stage *st, int l, const float *p, const uint16_t *p16, const ParamTangents *t,
                          const float *x, const float *xdot, float *y, float *ydot, int rows);
HeadTangents perturb_activity_head_tangents(Stage *st, int l, const ParamTangents *t,
                                            const float *x, int rows, TangentKey *key);

#endif
