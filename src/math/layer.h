// Layers: every kind has the same three functions (forward, jvp, backward).
//
// Shapes: a micro-batch of B samples is a row-major matrix, one row per sample:
//   x [B, in], y [B, out].
// Forward-mode tangents travel as K extra blocks ("columns" of the JVP):
//   xdot [K, B, in], ydot [K, B, out], pdot [K, param_count].
// pdot == NULL holds the parameters fixed; xdot == NULL means a zero input tangent
// (the first layer: the data has no tangent).
// backward adds this micro-batch's parameter gradient into dp (+=) and writes the input
// adjoint into dx (skipped when dx == NULL, e.g. for the first layer).
// Either half can run alone (the split Bi / Bw of zero-bubble schedules): dp == NULL skips the
// parameter gradient; dx == NULL reads no parameters (p may be NULL), except in a head fused
// with the loss (LAYER_HEAD_LOSS), whose weight gradient recomputes the logits.
//
// Sequences (the GPT): a sample is `tokens` rows of in/tokens features, so every per-token op
// runs on B * tokens rows. A transformer block is a chain of such layers that carries its
// residual stream x ahead of the branch it computes: with carry = C, a token's input is
// [x (C), h] and its output [x, f(h)], or x + f(h) for a residual layer (the block's last
// linear). The stage code sees one sequential chain, so every layer keeps one input and one
// output, and stages can be cut between any two layers.
#ifndef FGPIPE_LAYER_H
#define FGPIPE_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef enum {
    LAYER_LINEAR,
    LAYER_RELU,
    LAYER_GELU,
    LAYER_EMBEDDING,  // token ids -> wte[id] + wpe[position] (layer_embedding.c)
    LAYER_LAYERNORM,  // (layer_norm.c)
    LAYER_ATTENTION,  // causal multi-head self-attention on [q, k, v] (layer_attention.c)
    LAYER_RMSNORM,    // Llama's RMSNorm over a token (layer_rmsnorm.c)
    LAYER_QKNORM,     // Qwen3's RMSNorm over each head of q and k (layer_qk_norm.c)
    LAYER_ROPE,       // rotary position embedding of q and k (layer_rope.c)
    LAYER_SWIGLU,     // silu(gate) * up (layer_swiglu.c)
    LAYER_LORA,       // a LoRA adapter's delta beside a frozen projection (layer_lora.c)
    LAYER_HEAD_LOSS,  // the model's head fused with its loss: scores labels (head_loss.h)
    LAYER_KIND_COUNT
} LayerKind;

// Rotary embedding's frequencies: theta^(-2i/d), rescaled by Llama 3's rope_scaling when
// factor > 0 (low, high: low_freq_factor, high_freq_factor; original:
// original_max_position_embeddings).
typedef struct {
    float theta;
    float factor, low, high;
    int original;
} RopeParams;

typedef struct {
    LayerKind kind;
    char name[32];        // "fc1", "h.0.attn.c_attn": names its tensors in logs and checkpoints
    int index;            // global position in the model: keys its tangents
    int in, out;          // features per sample (tokens * features per token)
    int tokens;           // rows per sample: 1 (MLP), ctx (GPT); 0 counts as 1
    int carry;            // per token: features of the residual stream passed ahead (0: none)
    int residual;         // the output is carry + f(branch) instead of [carry, f(branch)]
    int no_bias;          // linear: no bias vector (the GPT's tied head)
    int heads;            // attention
    int kv_heads;         // attention, rope, qk norm: heads of k and v (0: heads; grouped-query
                          // attention when fewer: head h reads kv head h / (heads / kv_heads))
    int head_dim;         // attention, rope, qk norm: features per head (0: carry / heads)
    int no_positions;     // embedding: no position table (wpe), the token rows only (Llama)
    float eps;            // rmsnorm, qk norm: added to the mean square (rms_norm_eps)
    RopeParams rope;      // rope: frequencies and Llama 3's scaling (rope_math.h)
    int vocab;            // embedding, fused head: rows of its token table
    int classes;          // fused head: the table's scored rows (the rest are padding)
    int head_block;       // fused head (LAYER_HEAD_LOSS): vocabulary columns it scores at a
                          // time; its output is a record per token
    int tail;             // linear: its input's last `tail` features per token are added to its
                          // branch output (a LoRA adapter's delta, layer_lora.c)
    int lora_rank;        // lora: r
    float lora_scale;     // lora: alpha / r
    int lora_parts[3];    // lora: rows of the projection's parts (q, k, v / gate, up / one)
    int lora_mask;        // lora: bit i set: part i is adapted
    int frozen;           // parameters held fixed (config freeze): no tangents, steps of size 0
    int stored_bf16;      // frozen, and its checkpoint holds it in BF16 (a Hugging Face import):
                          // its store and checkpoints keep BF16 (half the bytes); in memory FP32
    int block_rows;       // > 0: a token table (embedding, fused head) read, computed and written
                          // in blocks of this many rows (layer_block; config table_block_rows)
    size_t param_offset;  // start of its parameters in the model's flat buffer
    size_t param_count;
    const struct Gemm *gemm;  // its matrix products (gemm.h): set by the CPU backend on the copy
                              // it runs (its precision's); NULL: FP32 through fg_sgemm
    const uint16_t *params16; // the BF16 copy of the call's parameters p (same layout), made when
                              // they were written (weights_bf16.h), for a BF16 gemm; NULL: none
                              // (the gemm rounds p per call)
} Layer;

static inline int layer_tokens(const Layer *L) { return L->tokens > 0 ? L->tokens : 1; }
static inline int layer_in_token(const Layer *L) { return L->in / layer_tokens(L); }
static inline int layer_out_token(const Layer *L) { return L->out / layer_tokens(L); }
static inline int layer_kv_heads(const Layer *L) { return L->kv_heads > 0 ? L->kv_heads : L->heads; }
static inline int layer_head_dim(const Layer *L) {
    return L->head_dim > 0 ? L->head_dim : L->carry / L->heads;
}

// Row blocks of a token table (block_rows > 0): rows of C floats, block b = rows [b * block_rows,
// ...) of the table (embedding: wte then wpe; the fused head: its vocab rows), the last one
// shorter. A layer without blocks is one block of all its parameters.
static inline size_t layer_row_floats(const Layer *L) {
    return L->kind == LAYER_EMBEDDING ? (size_t)layer_out_token(L) : (size_t)layer_in_token(L);
}
static inline int layer_blocks(const Layer *L) {
    if (!L->block_rows) return 1;
    size_t block = (size_t)L->block_rows * layer_row_floats(L);
    return (int)((L->param_count + block - 1) / block);
}
// Block b's first float and floats; its first row is *first / layer_row_floats(L).
static inline void layer_block(const Layer *L, int b, size_t *first, size_t *count) {
    size_t block = L->block_rows ? (size_t)L->block_rows * layer_row_floats(L) : L->param_count;
    *first = (size_t)b * block;
    *count = L->param_count - *first < block ? L->param_count - *first : block;
}

// The columns of an output token that a layer's parameters produce (activity perturbation
// perturbs these, and only these): a linear's h W^T + b (all of a residual one's output), a
// LayerNorm's or RMSNorm's normalised copy, an embedding's whole output, a q/k norm's q and k.
static inline void layer_branch(const Layer *L, int *offset, int *width) {
    int out = layer_out_token(L);
    if (L->kind == LAYER_LAYERNORM || L->kind == LAYER_RMSNORM) {
        *offset = L->carry ? layer_in_token(L) : 0;
        *width = layer_in_token(L);
    } else if (L->kind == LAYER_QKNORM) {  // the normalised q and k heads
        *offset = L->carry;
        *width = (L->heads + layer_kv_heads(L)) * layer_head_dim(L);
    } else if (L->kind == LAYER_LORA) {  // the delta after the input passed ahead
        *offset = layer_in_token(L);
        *width = out - *offset;
    } else if (L->residual || !L->carry) {
        *offset = 0;
        *width = out;
    } else {
        *offset = L->carry;
        *width = out - L->carry;
    }
}

// A layer kind's functions. The fused head (LAYER_HEAD_LOSS) scores labels, so its forward and
// jvp take them: they are head_loss.h's (Backend.head_forward, head_jvp), called through
// stage_head_forward with the labels as an argument; its row holds neither.
typedef struct {
    const char *kind_name;
    size_t (*param_count)(const Layer *L);
    void (*forward)(const Layer *L, const float *p, const float *x, float *y, int B);
    void (*jvp)(const Layer *L, const float *p, const float *pdot, const float *x,
                const float *xdot, float *y, float *ydot, int B, int K);
    void (*backward)(const Layer *L, const float *p, const float *x, const float *dy, float *dx,
                     float *dp, int B);
} LayerOps;

extern const LayerOps linear_ops, relu_ops, gelu_ops, embedding_ops, layernorm_ops,
    attention_ops, rmsnorm_ops, qknorm_ops, rope_ops, swiglu_ops, lora_ops, head_loss_ops;

static inline const LayerOps *layer_ops(const Layer *L) {
    static const LayerOps *const table[LAYER_KIND_COUNT] = {
        &linear_ops, &relu_ops,    &gelu_ops,   &embedding_ops, &layernorm_ops,
        &attention_ops, &rmsnorm_ops, &qknorm_ops, &rope_ops,   &swiglu_ops, &lora_ops,
        &head_loss_ops};
    return table[L->kind];
}

// Whether a BF16 gemm reads the layer's weights from a BF16 copy (Layer.params16) made when they
// are written: a linear layer's and a whole fused head's products (a table in row blocks, and a
// LoRA adapter's small factors, are rounded per call).
static inline int layer_has_weights16(const Layer *L) {
    return (L->kind == LAYER_LINEAR || L->kind == LAYER_HEAD_LOSS) && !L->block_rows;
}

// L run with p16 as its weights' BF16 copy (NULL: none).
static inline Layer layer_with_weights16(const Layer *L, const uint16_t *p16) {
    Layer w = *L;
    w.params16 = p16;
    return w;
}

// Whether the weight half of backward (dx == NULL) reads the parameters: a head fused with the
// loss recomputes its logits, a LoRA adapter's dA needs B and its dB needs A.
static inline int layer_grad_reads_params(const Layer *L) {
    return L->kind == LAYER_HEAD_LOSS || L->kind == LAYER_LORA;
}

// Softmax + cross-entropy over C.classes classes, mean over the B rows of a micro-batch. Not a
// Layer: it ends the model with a scalar. Rows of logits (and of zdot, dz) lie C.stride apart:
// the GPT pads its vocabulary to a multiple of pad_vocab rows, and the pad columns are left
// out of the softmax (their dz is 0).
typedef struct {
    int classes, stride;
} LogitRows;
static inline LogitRows logit_rows(int classes) { return (LogitRows){classes, classes}; }

// loss_forward returns the mean loss; correct (may be NULL) counts argmax hits.
float loss_forward(const float *logits, const Label *labels, int B, LogitRows C, int *correct);
// Also writes d[k] = directional derivative of the loss along tangent block k of zdot.
float loss_jvp(const float *logits, const float *zdot, const Label *labels, int B, LogitRows C,
               int K, float *d);
// The same per sample: d_rows[k*B + r] = directional derivative of row r's own loss (not
// divided by B) along tangent block k, for activity perturbation.
float loss_jvp_rows(const float *logits, const float *zdot, const Label *labels, int B,
                    LogitRows C, int K, float *d_rows);
// dz = d(mean loss)/d(logits), [B, C.stride].
float loss_backward(const float *logits, const Label *labels, int B, LogitRows C, float *dz);

#endif
