// The GPT's head fused with its loss (docs/gpt.md, "The fused head and loss"): logits z = x Wᵀ
// of a token row are formed L->head_block (HEAD_BLOCK_COLUMNS by default) vocabulary columns at
// a time, with a running max and sum (an online softmax), so no row of V logits is ever whole:
// not in a lane, an adjoint or a message. What a row leaves behind is a record of HEAD_RECORD
// floats, its "output":
//   {label, zmax, inv, weight}: the label (exact in a float: ids < 2^24), the largest logit,
//   the float reciprocal of sum_j exp(z_j - zmax), and the scale of the row's adjoint in op B
//   (the mean's 1/rows times `weight`).
// The JVP forms each block's logits and tangents zdot = xdot Wᵀ + x Wdotᵀ (+ low-rank or
// activity terms) once and accumulates sum_j exp(z_j - zmax) zdot_j with the running rescaling:
// d = that / sum - zdot_label. The backward recomputes the logits block by block from the
// record: p_j = exp(z_j - zmax) * inv, dz_j = (p_j - [j == label]) / rows * weight, the input
// adjoint dx = sum_j dz_j W_j, dW_j += dz_jᵀ x.
// Only the first `classes` columns are scored (the rest pad the table: no softmax, zero
// gradient). With one block (the byte-level GPT: 256 columns) every number is the unfused
// linear layer's and loss.c's, bit for bit: the same GEMMs, the same row formulas
// (loss_math.h) in the same order.
#ifndef FGPIPE_HEAD_LOSS_H
#define FGPIPE_HEAD_LOSS_H

#include "layer.h"
#include "tangent.h"

// Vocabulary columns per block: GPT-2's 50257 scored columns are 13 blocks.
enum { HEAD_BLOCK_COLUMNS = 4096 };
enum { HEAD_RECORD = 4 };

// x [B * tokens, C] (C = layer_in_token(L)), W [L->vocab, C], labels [B * tokens]: writes each
// row's record (weight: `weight`) into rec [B * tokens, HEAD_RECORD] and returns the mean loss
// over the rows; *correct (may be NULL) counts the rows whose largest logit is the label's.
float head_loss_forward(const Layer *L, const float *W, const float *x, const Label *labels,
                        int B, float weight, float *rec, int *correct);
// The same loss and hits from rows whose logits are whole, z [rows][C.stride] (an unfused
// head: fgpipe eval in memory): each row's running softmax over blocks of `block` columns as
// head_loss_forward forms it, so that a fused head's evaluation of the same logits agrees bit
// for bit (with one block, loss_forward's arithmetic).
float head_loss_of_logits(const float *z, const Label *labels, int rows, LogitRows C, int block,
                          int *correct);
// The tangents of the head's logits zdot_k besides xdot_k Wᵀ (every pointer may be NULL):
typedef struct {
    const float *Wdot;           // full weight tangents [K, param_count]: + x Wdot_kᵀ
    size_t wdot_stride;          // floats from one Wdot_k to the next (0: param_count)
    const float *At, *P;         // low-rank ones of rank `rank`: + P_k At_k / sqrt(rank), At
    int rank;                    // [K, rank, vocab], P = x Bt_kᵀ [K, rows, rank] (stage.h)
    const TangentKey *activity;  // activity tangents: + u_k of this key (a row of vocab values
                                 // per token, the pad columns never read); d is then per row
} HeadTangents;

// The same, and d[k] = the directional derivative of the mean loss along tangent k: xdot
// [K, rows, C] (NULL: 0) and t (NULL: none). With t->activity, d is per row, [K, rows]: row r's
// own derivative (not divided by rows), as loss_jvp_rows writes it.
float head_loss_jvp(const Layer *L, const float *W, const float *x, const float *xdot,
                    const Label *labels, int B, int K, float weight, const HeadTangents *t,
                    float *rec, float *d);
// From the records: dx [rows, C] = the input adjoint (skipped when NULL), dW += the weight
// gradient (skipped when NULL). Both read W (the logits are recomputed).
void head_loss_backward(const Layer *L, const float *W, const float *x, const float *rec,
                        float *dx, float *dW, int B);
// The head over row blocks of its table, for a table streamed a block at a time
// (docs/out-of-core.md): W holds the table's rows [r0, r0 + n) (with Wdot's rows alike, Wdot_k
// wdot_stride apart), r0 a multiple of L->head_block. Called on the blocks in ascending order,
// covering the table, every number is the whole-table call's, bit for bit (more than one
// block of columns: the JVP's online path). The rows' running softmax is carried between the
// calls in `state` (head_rows_state_bytes, for B samples and K tangents).
size_t head_rows_state_bytes(const Layer *L, int B, int K);
void head_rows_forward(const Layer *L, const float *W, int r0, int n, const float *x,
                       const Label *labels, int B, void *state);
// After the last block: head_loss_forward's records and mean loss.
float head_rows_finish(const Layer *L, const void *state, const Label *labels, int B,
                       float weight, float *rec, int *correct);
void head_rows_jvp(const Layer *L, const float *W, int r0, int n, const float *x,
                   const float *xdot, const Label *labels, int B, int K, const HeadTangents *t,
                   void *state);
// After the last block: head_loss_jvp's records, loss and d (per_row: activity tangents).
float head_rows_jvp_finish(const Layer *L, const void *state, const Label *labels, int B, int K,
                           float weight, int per_row, float *rec, float *d);
// head_loss_backward's dx (the block at r0 = 0 starts it, the others add) and dW's rows
// [r0, r0 + n) (dW: those rows), from the records.
void head_rows_backward(const Layer *L, const float *W, int r0, int n, const float *x,
                        const float *rec, float *dx, float *dW, int B);
// Floats of scratch the calls hold at once for B samples and K tangents (a block's logits and
// their tangents, the rows' running sums and derivatives), and with n_mb > 0 the activity
// estimate's G over n_mb micro-batches: what a memory budget counts for the fused head.
size_t head_loss_work_floats(const Layer *L, int B, int K, int n_mb);
// The activity estimate of the head's weight (stage_layer_activity_estimate's, block by block):
// dW += Gᵀ x with G = sum_k diag(coeff) u_k over n_mb micro-batches of B samples (micro-batch
// key.microbatch + b), coeff [n_mb, K, B] per sample (on each of its token rows), x [n_mb * B *
// tokens, C] the head's kept inputs.
void head_loss_activity_grad(const Layer *L, TangentKey key, int K, int n_mb, int B,
                             const float *coeff, const float *x, float *dW);

#endif
